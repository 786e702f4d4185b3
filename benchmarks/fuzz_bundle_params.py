"""Fuzz a bundle's parameters: every drawn parameter pytree comes back with the same shapes, dtypes and values.

    python benchmarks/fuzz_bundle_params.py [--cases 200] [--seed 0] [--devices 4]
    (or python benchmarks/fuzz_bundle.py --params 200)

Each case draws a parameter pytree (nested dicts, lists and tuples of 1-6 leaves) from what users pass:
Python ``bool``/``int``/``float``/``complex`` (weakly typed under ``jax.jit``), NumPy scalars, 0-d arrays,
``bool`` and integer arrays, ``float16``/``bfloat16``/``float8_*``/``int4`` arrays, ``float64`` (canonicalized
to ``float32`` without x64), Fortran-ordered, transposed and negatively strided views, ``jax.Array`` s placed on
any device (or sharded over all of them), weakly typed ``jax.Array`` s and typed PRNG keys. The program returns
every leaf as it sees it, ``x * leaf`` for each numeric scalar (a weak type keeps ``x``'s ``bfloat16``; a
strong one promotes), and a ``lax.cond`` on each scalar. The bundle is exported (rows declared independent: no
row analysis), loaded, and called; a finding is any output whose shape, dtype or bits differ from
``jax.jit(fn)(params, x)``, a stored tensor that differs from the leaf as ``jax.jit`` sees it, or an exception.
Prints the counts and every finding; exit 1 if there is one.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

KINDS = ("py_bool", "py_int", "py_float", "py_complex", "np_scalar", "zero_d", "bool", "int", "half", "bfloat16",
         "float8", "int4", "float64", "fortran", "transposed", "negative_stride", "jax_on_device", "jax_sharded",
         "jax_weak", "key")
_SUB_BYTE = ("int4", "uint4")
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e3m4")


def draw_leaf(rng: random.Random, kind: str):
    """One parameter of ``kind`` (small exact values: every dtype holds them)."""
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 2)))
    values = np.array([rng.choice([-2, -1, 0, 1, 2, 3]) for _ in range(int(np.prod(shape)))]).reshape(shape)
    if kind == "py_bool":
        return rng.random() < 0.5
    if kind == "py_int":
        return rng.randint(-5, 5)
    if kind == "py_float":
        return rng.choice([0.5, 1.5, -2.25, 333.137])
    if kind == "py_complex":
        return complex(rng.choice([1, -2]), rng.choice([0.5, 3]))
    if kind == "np_scalar":
        return rng.choice([np.float32(1.25), np.int16(-3), np.float64(0.1), np.bool_(True), np.uint8(7)])
    if kind == "zero_d":
        return np.array(rng.choice([2.5, -1.0]), dtype=rng.choice([np.float32, np.float16, np.int32]))
    if kind == "bool":
        return values > 0
    if kind == "int":
        return values.astype(rng.choice([np.int8, np.int16, np.int32, np.uint8, np.uint32]))
    if kind == "half":
        return values.astype(np.float16)
    if kind == "bfloat16":
        return values.astype(ml_dtypes.bfloat16)
    if kind == "float8":
        return values.astype(getattr(ml_dtypes, rng.choice(_FLOAT8)))
    if kind == "int4":
        return values.astype(rng.choice([ml_dtypes.int4, ml_dtypes.uint4]) if values.min() >= 0 else ml_dtypes.int4)
    if kind == "float64":
        return values.astype(np.float64) / 3
    if kind == "fortran":
        return np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4) / 7)
    if kind == "transposed":
        return (np.arange(6, dtype=np.int32).reshape(2, 3) - 2).T
    if kind == "negative_stride":
        return np.arange(10, dtype=np.float32)[::-3]
    if kind == "jax_on_device":
        return jax.device_put(values.astype(np.float32), rng.choice(jax.devices()))
    if kind == "jax_sharded":
        n = len(jax.devices())
        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("d",))
        spec = jax.sharding.PartitionSpec("d")
        return jax.device_put(np.arange(2 * n, dtype=np.float32), jax.sharding.NamedSharding(mesh, spec))
    if kind == "jax_weak":
        return jnp.asarray(rng.choice([1.5, -3.0]))  # a Python float through jnp.asarray: weakly typed
    if kind == "key":
        return jax.random.key(rng.randint(0, 100))
    raise ValueError(kind)


def draw_params(rng: random.Random, kinds=KINDS):
    """``(params, kinds drawn)``: a nested pytree of 1-6 leaves."""
    drawn = [rng.choice(kinds) for _ in range(rng.randint(1, 6))]
    leaves = [draw_leaf(rng, k) for k in drawn]
    params: dict = {}
    for i, leaf in enumerate(leaves):
        where = rng.choice(["top", "nested", "list", "tuple"])
        if where == "top":
            params[f"p{i}"] = leaf
        elif where == "nested":
            params.setdefault("block", {})[f"p{i}"] = leaf
        elif where == "list":
            params.setdefault("layers", []).append(leaf)
        else:
            params[f"pair{i}"] = (leaf, rng.choice([0.5, 2]))
            drawn.append("py_float")
    return params, drawn


def program(p, x):
    """Every leaf as the program sees it, ``x * leaf`` and a ``lax.cond`` per numeric scalar."""
    import jax
    import jax.numpy as jnp

    out = {}
    for i, leaf in enumerate(jax.tree_util.tree_leaves(p)):
        leaf = jnp.asarray(leaf)
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            out[f"key{i}"] = jax.random.uniform(leaf, (2,))
            continue
        if leaf.dtype.name in _SUB_BYTE:
            leaf = leaf.astype(jnp.int32)  # a sub-byte integer leaves the program as int32
        out[f"leaf{i}"] = leaf
        if leaf.ndim == 0 and leaf.dtype != bool:
            out[f"times{i}"] = x * leaf
            out[f"cond{i}"] = jax.lax.cond(leaf != 0, lambda v: v + 1, lambda v: v - 1, x)
    return out


def _as_jit_sees(leaf):
    """The leaf as ``jax.jit`` traces it (NumPy: its shape, canonical dtype and values; keys: their data)."""
    import jax
    import numpy as np

    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(leaf))
    arr = np.asarray(leaf)
    if isinstance(leaf, (int, float, complex)) and not isinstance(leaf, (bool, np.generic)):
        arr = np.asarray(leaf, dtype=jax.dtypes.canonicalize_dtype(np.result_type(type(leaf))))
    return arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype))


def _same(a, b) -> str | None:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{list(a.shape)} where jax.jit gives {b.dtype}{list(b.shape)}"
    if a.tobytes() != b.tobytes():
        return f"values {a.ravel()[:4]} where jax.jit gives {b.ravel()[:4]}"
    return None


def run_case(params, folder: Path) -> list[str]:
    """Export, load and call; the findings (empty: every parameter and output came back identical)."""
    import jax
    import ml_dtypes
    import numpy as np

    from xlakit.bundle import export_bundle, load_bundle
    from xlakit.bundle.weights import flatten_params, read_weights

    x = np.arange(6, dtype=ml_dtypes.bfloat16).reshape(2, 3)
    findings = []
    try:
        reference = jax.jit(program)(_one_device(params), x)
        export_bundle(program, params, x, folder, batch_sizes=(2,), rows_independent=True)
        stored = read_weights(folder / "weights.safetensors")
        names, leaves, _ = flatten_params(params)
        for name, leaf in zip(names, leaves, strict=True):
            want = _as_jit_sees(leaf)
            got = stored[name]
            if want.dtype.name in _SUB_BYTE:  # stored byte-wide (int8/uint8), the same values
                got, want = got.astype(np.int32), want.astype(np.int32)
            if (problem := _same(got, want)) is not None:
                findings.append(f"stored parameter {name!r}: {problem}")
        loaded = load_bundle(folder, progress=False, background=False)
        out = loaded(x)
        for key, want in reference.items():
            if (problem := _same(out[key], want)) is not None:
                findings.append(f"output {key!r}: {problem}")
            elif getattr(out[key], "weak_type", False) != getattr(want, "weak_type", False):  # dtype of later math
                findings.append(f"output {key!r}: weak_type {getattr(out[key], 'weak_type', False)} where jax.jit "
                                f"gives {getattr(want, 'weak_type', False)}")
    except Exception as e:  # noqa: BLE001 - the finding
        findings.append(f"{type(e).__name__}: {str(e)[:300]}")
    return findings


def _one_device(params):
    """``params`` with every ``jax.Array`` copied to the host: ``jax.jit`` refuses arguments on different
    devices (a bundle takes them from anywhere), and the host copy has the same shape, dtype and weak type."""
    import jax
    import numpy as np

    def host(leaf):
        if isinstance(leaf, jax.Array) and not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) \
                and not leaf.weak_type:
            return np.asarray(leaf)
        return leaf

    return jax.tree_util.tree_map(host, params)


def run(cases: int, seed: int, out=print, kinds=KINDS) -> dict:
    """Fuzz ``cases`` parameter pytrees drawn from ``kinds``; returns the counts and ``findings``."""
    import warnings

    rng = random.Random(seed)
    counts: dict = {"cases": cases, "kinds": {}}
    findings: list[str] = []
    start = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="fuzz-params-"))
    for i in range(cases):
        params, drawn = draw_params(rng, kinds)
        for k in drawn:
            counts["kinds"][k] = counts["kinds"].get(k, 0) + 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for f in run_case(params, root / f"case{i}"):
                findings.append(f"case {i} [{', '.join(drawn)}]: {f}")
    counts["seconds"] = round(time.perf_counter() - start, 1)
    counts["findings"] = findings
    out(f"{cases} parameter pytrees (seed {seed}) exported, loaded and called in {counts['seconds']} s: "
        f"{len(findings)} findings")
    for k in sorted(counts["kinds"]):
        out(f"  {k}: {counts['kinds'][k]}")
    for f in findings:
        out(f"FINDING {f}")
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", type=int, default=4, help="CPU devices to place and shard parameters on")
    args = parser.parse_args(argv)
    if "device_count" not in os.environ.get("XLA_FLAGS", ""):  # read when JAX starts its backend
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_force_host_platform_device_count={args.devices}")
    return 1 if run(args.cases, args.seed)["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
