"""Fuzz the row proof: random batch programs, each called at padded and chunked sizes; 0 wrong answers.

    python benchmarks/fuzz_bundle_rows.py [--programs 1000] [--seed 0]
    (or python benchmarks/fuzz_bundle.py --programs 1000)

Each program is ``fn(params, x)`` with ``x`` of shape ``(batch, 4)``: a chain of 1-4 steps drawn from row-wise
steps (elementwise, matmul with weights, per-row reductions and softmax, reshape/transpose keeping rows,
``where``, per-row gathers, scans and cumsums over features, embedding lookups, ``cond``/``fori_loop``/
``checkpoint``/``vmap``) and, with probability 1/5 per step, coupling steps (mean, cumsum, sort, max or Gram
matrix over rows, a shift or flip by rows, row positions, the batch size as a number, centring switched on
by an outlier, and branches on ``x.shape[0]``), sometimes with a second batched output and a non-batched one
(a weight statistic, or a sum over rows). For each, the bundle's verdict (:func:`xlakit.bundle.rows`'s steps
1-2: the symbolic trace and :func:`~xlakit.bundle.row_proof.prove_rows`; no compile). For every program
*proven* row-wise, ``n`` (5-7) rows are evaluated directly with JAX and compared with the rows run in chunks of
4, the last chunk padded with *random* rows (stronger than the loader's zeros) and cut back, then joined (what
a bundle exported for 4 rows does); non-batched outputs must not change. A difference beyond float rounding is
a wrong answer (a finding: exit 1). For one refused program in four the same comparison counts how many
padding would really have broken (the proof is not vacuous). Prints the counts.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

F = 4  # features per row


def _steps():
    import jax
    import jax.numpy as jnp

    perm = jnp.array([2, 0, 3, 1])
    row_wise = {
        "matmul": lambda p, h: h @ p["w"],
        "bias_tanh": lambda p, h: jnp.tanh(h + p["b"]),
        "relu": lambda p, h: jax.nn.relu(h),
        "softmax": lambda p, h: jax.nn.softmax(h, axis=-1),
        "layer_norm": lambda p, h: (h - h.mean(-1, keepdims=True)) / (h.std(-1, keepdims=True) + 1e-3),
        "row_sum": lambda p, h: h + h.sum(axis=1, keepdims=True),
        "row_max": lambda p, h: h - h.max(axis=1, keepdims=True),
        "reshape_transpose": lambda p, h: h.reshape(-1, 2, F // 2).transpose(0, 2, 1).reshape(h.shape[0], F),
        "where": lambda p, h: jnp.where(h > 0, h, 0.1 * h),
        "gather_columns": lambda p, h: h[:, perm],
        "take_along_axis": lambda p, h: jnp.take_along_axis(h, jnp.argsort(h, axis=1), axis=1),
        "scan_features": lambda p, h: jax.lax.scan(lambda c, col: (c * 0.5 + col, c + col),
                                                   jnp.zeros(h.shape[0]), h.T)[1].T,
        "cumsum_features": lambda p, h: jnp.cumsum(h, axis=1),
        "sort_features": lambda p, h: jnp.sort(h, axis=1),
        "set_column": lambda p, h: h.at[:, 0].set(h[:, 1]),
        "embedding": lambda p, h: h + p["table"][jnp.clip((h[:, 0] * 3).astype(jnp.int32), 0, 5)],
        "vmap": lambda p, h: jax.vmap(lambda r: r * jnp.sum(r ** 2) / (1 + jnp.sum(r ** 2)))(h),
        "cond_on_weight": lambda p, h: jax.lax.cond(p["w"][0, 0] > 0, jnp.sin, jnp.cos, h),
        "fori_loop": lambda p, h: jax.lax.fori_loop(0, 2, lambda i, v: jnp.tanh(v @ p["w"]), h),
        "einsum": lambda p, h: jnp.einsum("bi,ij->bj", h, p["w"]),
        "concat_features": lambda p, h: jnp.concatenate([h[:, :2], h[:, 2:] * 2], axis=1),
        "pad_features": lambda p, h: jnp.pad(h, ((0, 0), (1, 0)))[:, :F],
        "roll_features": lambda p, h: jnp.roll(h, 1, axis=1),
        "checkpoint": lambda p, h: jax.checkpoint(lambda v: jnp.sin(v) * 2)(h),
        "ones_of_batch_size": lambda p, h: h + jnp.ones((h.shape[0], F)),
    }
    coupling = {
        "mean_over_rows": lambda p, h: h - h.mean(axis=0),
        "cumsum_over_rows": lambda p, h: jnp.cumsum(h, axis=0) / 3,
        "shift_by_one_row": lambda p, h: jnp.concatenate([h[1:], jnp.zeros_like(h[:1])], axis=0),
        "roll_rows": lambda p, h: jnp.roll(h, 1, axis=0),
        "sort_along_rows": lambda p, h: jnp.sort(h, axis=0),
        "outlier_centring": lambda p, h: jnp.where(jnp.any(jnp.abs(h) > 2.5), h - h.mean(0), h),
        "global_max": lambda p, h: h / jnp.max(jnp.abs(h)),
        "row_positions": lambda p, h: h + jnp.arange(h.shape[0])[:, None] * 0.1,
        "batch_size_as_number": lambda p, h: h * h.shape[0] / 4,
        "flip_rows": lambda p, h: h[::-1],
        "gram_over_rows": lambda p, h: h @ (h.T @ h) / 10,
        "first_row": lambda p, h: h + h[0],
        "branch_size_mod_2": lambda p, h: h * 2 if h.shape[0] % 2 else h,
        "branch_size_ge_5": lambda p, h: h * 2 if h.shape[0] >= 5 else h,
        "branch_size_eq_5": lambda p, h: h * 2 if h.shape[0] == 5 else h,
    }
    return row_wise, coupling


def make_program(rng: random.Random, row_wise: dict, coupling: dict):
    """``(fn, description)``: a random chain of steps and optional extra outputs."""
    import jax.numpy as jnp

    names = [rng.choice(sorted(coupling)) if rng.random() < 0.2 else rng.choice(sorted(row_wise))
             for _ in range(rng.randint(1, 4))]
    steps = [coupling.get(n) or row_wise[n] for n in names]
    extra = rng.choice(["", "", "", "second_batched", "weight_stat", "sum_over_rows"])

    def fn(p, x):
        h = x
        for step in steps:
            h = step(p, h)
        out = {"y": h}
        if extra == "second_batched":
            out["z"] = h[:, :2] * 2
        elif extra == "weight_stat":
            out["s"] = jnp.sum(p["w"])
        elif extra == "sum_over_rows":
            out["s"] = jnp.sum(h)
        return out

    return fn, " -> ".join(names) + (f" + {extra}" if extra else "")


def verdict(fn, params) -> tuple[str, str]:
    """``(how, reason)`` as an export would record it, from steps 1-2 (no compile)."""
    import jax

    from xlakit._jax.symbolic import trace_symbolic
    from xlakit.bundle.row_proof import prove_rows

    (b,) = jax.export.symbolic_shape("batch")
    weights = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in params.items()}

    def flat(w, x):
        return tuple(jax.tree_util.tree_leaves(fn(w, x)))

    trace = trace_symbolic(flat, weights, jax.ShapeDtypeStruct((b, F), "float32"))
    if trace.problem or trace.guesses:
        return "size-dependent", trace.problem or trace.guesses[0]
    out = jax.eval_shape(flat, weights, jax.ShapeDtypeStruct((b, F), "float32"))
    batched = [bool(o.shape) and not isinstance(o.shape[0], int) for o in out]
    v = prove_rows(trace.jaxpr, len(weights), batched)
    return ("proven", v.reason) if v.proven else ("coupled", v.reason)


def _close(a, b) -> bool:
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False
    scale = 1.0 + float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0))
    return bool(np.allclose(a, b, rtol=1e-4, atol=1e-4 * scale, equal_nan=True))


def padded_and_chunked_agree(fn, params, x, rng, size: int = 4) -> str | None:
    """None when ``fn`` on the ``n > size`` rows of ``x`` gives the same answer run as chunks of ``size`` rows,
    the last one padded with *random* rows up to ``size`` and cut back (what the loader does above the largest
    exported size, with zeros), else what differs. Evaluated with ``jax.jit``: two compiles (``n`` and
    ``size`` rows), no bundle."""
    import jax
    import numpy as np

    fn = jax.jit(fn)
    n = x.shape[0]
    direct = fn(params, x)
    fill = np.random.default_rng(rng.randrange(2 ** 32)).standard_normal((size, F)).astype(np.float32) * 3
    chunks = []
    for start in range(0, n, size):
        part = x[start:start + size]
        chunks.append((len(part), fn(params, np.concatenate([part, fill[:size - len(part)]]))))
    for key, want in direct.items():
        if np.ndim(want) > 0 and np.shape(want)[0] == n:  # batched
            got = np.concatenate([np.asarray(out[key])[:m] for m, out in chunks])
            if not _close(got, want):
                return f"output {key}: padding and chunking changed it"
        elif not all(_close(out[key], want) for _, out in chunks):
            return f"output {key} (not batched): padding or chunking changed it"
    return None


def run(programs: int, seed: int, out=print, sample_refused: int = 4, progress: int = 100) -> dict:
    """Fuzz ``programs`` programs; returns the counts (``wrong``: proven programs whose padded or chunked
    answer differed, with ``findings`` listing them). One refused program in ``sample_refused`` is evaluated
    too (0: none)."""
    import numpy as np

    rng = random.Random(seed)
    row_wise, coupling = _steps()
    params = {"w": np.linspace(-1, 1, F * F, dtype=np.float32).reshape(F, F),
              "b": np.linspace(-0.5, 0.5, F, dtype=np.float32),
              "table": np.linspace(-1, 1, 6 * F, dtype=np.float32).reshape(6, F)}
    counts = {"programs": programs, "proven": 0, "coupled": 0, "size-dependent": 0, "checked": 0, "wrong": 0,
              "refused_sampled": 0, "refused_that_padding_breaks": 0}
    findings: list[str] = []
    start = time.perf_counter()
    for i in range(programs):
        if i and i % progress == 0:
            out(f"  ... {i} programs, {counts['proven']} proven, {counts['wrong']} wrong, "
                f"{time.perf_counter() - start:.0f} s")
        fn, text = make_program(rng, row_wise, coupling)
        how, reason = verdict(fn, params)
        counts[how] += 1
        n = rng.choice([5, 6, 7])  # chunks of 4: one full, one padded
        x = np.random.default_rng(i).standard_normal((n, F)).astype(np.float32)
        if how != "proven" and (not sample_refused or i % sample_refused):
            continue  # refused programs are only sampled (one in four): their answers are never padded
        try:
            problem = padded_and_chunked_agree(fn, params, x, rng)
        except Exception as e:  # noqa: BLE001 - a coupled program may fail at another size (e.g. shapes)
            problem = f"{type(e).__name__} at another size"
        if how == "proven":
            counts["checked"] += 1
            if problem is not None:
                counts["wrong"] += 1
                findings.append(f"program {i} [{text}]: proven, but {problem}")
        else:
            counts["refused_sampled"] += 1
            counts["refused_that_padding_breaks"] += problem is not None
    counts["seconds"] = round(time.perf_counter() - start, 1)
    counts["findings"] = findings
    out(f"{programs} random batch programs (seed {seed}) in {counts['seconds']} s: {counts['proven']} proven "
        f"row-wise, {counts['coupled']} coupled, {counts['size-dependent']} size-dependent (refused: "
        f"{counts['coupled'] + counts['size-dependent']}); padded and chunked answers checked for "
        f"{counts['checked']} proven programs: {counts['wrong']} wrong. Of {counts['refused_sampled']} refused "
        f"programs sampled, {counts['refused_that_padding_breaks']} would really have changed under padding or "
        "chunking.")
    for f in findings:
        out(f"FINDING {f}")
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return 1 if run(args.programs, args.seed)["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
