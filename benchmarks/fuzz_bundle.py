"""Fuzz a bundle's files: every mutation must end in a documented outcome, at once, touching nothing outside.

    python benchmarks/fuzz_bundle.py [--cases 10000] [--seed 0] [--load-every 20]
    python benchmarks/fuzz_bundle.py --programs 1000    (random batch programs: benchmarks/fuzz_bundle_rows.py)
    python benchmarks/fuzz_bundle.py --params 200       (random parameter pytrees: benchmarks/fuzz_bundle_params.py)

Each case mutates one file of a valid, warm bundle (manifest.json, .cache/module_hashes.json, the
safetensors header, a module file, .cache itself) in one way — truncation, bit flips, deep nesting, huge
or non-finite numbers, wrong JSON types, a missing or extra field, or another file kind (FIFO, symlink to
/dev/zero, folder, symlink to a file or folder outside the bundle, dangling symlink, 2 GiB sparse file) —
then runs ``check_bundle`` and ``xlakit bundle check`` (no JAX, cheap) and, every ``--load-every`` cases,
``load_bundle`` (modules' contents are then only truncated or replaced, never bit-flipped: a flipped but
valid program would be compiled, which is slow, not wrong). A finding is: an exception other than the
documented ones (``check_bundle``: none; ``load_bundle``: ``BundleError`` subclasses; the CLI: exit 0/1/2
without the "unexpected error" line), a case over its time bound (a hang), or a change to a file outside
the bundle folder. Prints the counts and every finding; exit 1 if there is one.

``tests/test_bundle_fuzz.py`` drives the same mutations with hypothesis (a few hundred per test run).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

TARGETS = ("manifest", "record", "weights", "module", "cache")
JSON_MUTATIONS = ("truncate", "bitflip", "nest", "number", "wrong_type", "drop_key", "add_key", "kind")
BYTE_MUTATIONS = ("truncate", "bitflip", "kind", "header_len")
KINDS = ("fifo", "dev_zero", "directory", "outside_file", "outside_dir", "dangling", "empty", "sparse")
NUMBERS = ("1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1" + "0" * 400, "1e308", "-0.0", "18446744073709551617",
           "1.5", "-1")
VALUES = (None, "", [], {}, True, -1, 1.5, "batch", "key<fry>", "../../etc/passwd", [[[]]], {"a": {}}, 2 ** 70)


# -- setup ------------------------------------------------------------------------------------------------------

def make_pristine(root: Path) -> Path:
    """A warm two-module bundle (batch sizes 1, 2; .cache filled) under ``root``; returns its path."""
    import warnings

    import numpy as np

    from xlakit.bundle import export_bundle, load_bundle

    path = root / "pristine"
    params = {"w": np.arange(6, dtype=np.float32).reshape(3, 2), "b": np.ones(2, np.float32)}
    export_bundle(lambda p, x: x @ p["w"] + p["b"], params, np.ones((2, 3), np.float32), path, batch_sizes=(1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_bundle(path, progress=False).wait()
    return path


def make_outside(root: Path) -> Path:
    """Files that belong to someone else; symlinks planted in the bundle point here."""
    out = root / "outside"
    (out / "dir").mkdir(parents=True, exist_ok=True)
    (out / "file.json").write_text('{"format_version": 1, "modules": {}}')
    (out / "dir" / "entry.xlk").write_bytes(b"someone else's entry")
    (out / "dir" / "module_hashes.json").write_text("{}")
    return out


def snapshot(folder: Path) -> dict:
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in filenames + dirnames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            data = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
            found[str(p.relative_to(folder))] = (stat.S_IFMT(st.st_mode), st.st_mtime_ns, data)
    return found


# -- mutations --------------------------------------------------------------------------------------------------

def target_path(bundle: Path, target: str, rng: random.Random) -> Path:
    if target == "manifest":
        return bundle / "manifest.json"
    if target == "record":
        return bundle / ".cache" / "module_hashes.json"
    if target == "weights":
        return bundle / "weights.safetensors"
    if target == "module":
        return bundle / rng.choice(["model.b1.jaxexp", "model.b2.jaxexp"])
    return bundle / ".cache"


def _remove(p: Path) -> None:
    if p.is_symlink() or not p.exists():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    elif p.is_dir():
        shutil.rmtree(p)
    else:
        os.unlink(p)


def plant_kind(p: Path, kind: str, outside: Path) -> None:
    _remove(p)
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", p)
    elif kind == "directory":
        p.mkdir()
    elif kind == "outside_file":
        os.symlink(outside / "file.json", p)
    elif kind == "outside_dir":
        os.symlink(outside / "dir", p)
    elif kind == "dangling":
        os.symlink(outside / "nothing-here", p)
    elif kind == "empty":
        p.write_bytes(b"")
    else:
        with open(p, "wb") as f:
            f.truncate(2 << 30)


def _nest(value, depth: int):
    text = json.dumps(value)
    return "[" * depth + text + "]" * depth


def _json_paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _json_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _json_paths(v, prefix + (i,))


def _replace(obj, path, new):
    if not path:
        return new
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = new
    return obj


def mutate_json_text(text: str, mutation: str, rng: random.Random) -> str:
    """One JSON-level mutation of ``text`` (a valid JSON document)."""
    data = json.loads(text)
    paths = list(_json_paths(data))
    where = rng.choice(paths)
    if mutation == "nest":
        depth = rng.choice([50, 101, 1000, 100_000])
        placeholder = "\u0000NEST\u0000"
        doc = json.dumps(_replace(data, where, placeholder))
        return doc.replace(json.dumps(placeholder), _nest(rng.choice(VALUES), depth))
    if mutation == "number":
        placeholder = "\u0000NUM\u0000"
        doc = json.dumps(_replace(data, where, placeholder))
        return doc.replace(json.dumps(placeholder), rng.choice(NUMBERS))
    if mutation == "wrong_type":
        return json.dumps(_replace(data, where, rng.choice(VALUES)))
    dicts = [p for p in paths if isinstance(_get(data, p), dict) and _get(data, p)]
    if mutation == "drop_key" and dicts:
        d = _get(data, rng.choice(dicts))
        d.pop(rng.choice(list(d)))
        return json.dumps(data)
    if mutation in ("drop_key", "add_key"):
        targets = [p for p in paths if isinstance(_get(data, p), dict)] or [()]
        d = _get(data, rng.choice(targets))
        if isinstance(d, dict):
            d[rng.choice(["x", "output_trees", "polymorphic", "rows_independent", "../x", "model.b9.jaxexp"])] = \
                rng.choice(VALUES)
        return json.dumps(data)
    raise ValueError(mutation)


def _get(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def mutate_bytes(data: bytes, mutation: str, rng: random.Random) -> bytes:
    if mutation == "truncate":
        return data[: rng.randrange(0, max(1, len(data)))]
    if mutation == "bitflip":
        out = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 8])):
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        return bytes(out)
    if mutation == "header_len":  # safetensors: the first 8 bytes are the header length (u64 little-endian)
        n = rng.choice([0, 1, 2 ** 63, 2 ** 64 - 1, len(data), 100_000_001, int.from_bytes(data[:8], "little") + 1])
        return n.to_bytes(8, "little") + data[8:]
    raise ValueError(mutation)


def mutate_safetensors_header(data: bytes, mutation: str, rng: random.Random) -> bytes:
    n = int.from_bytes(data[:8], "little")
    header = data[8:8 + n].decode("utf-8")
    new = mutate_json_text(header, mutation, rng).encode("utf-8")
    return len(new).to_bytes(8, "little") + new + data[8 + n:]


def apply(bundle: Path, outside: Path, target: str, mutation: str, rng: random.Random, kind: str | None = None,
          allow_flip_modules: bool = True) -> str:
    """Mutate ``bundle`` in place; returns a description of the case."""
    p = target_path(bundle, target, rng)
    if mutation == "kind" or target == "cache":
        kind = kind or rng.choice(KINDS if target != "cache" else ("outside_dir", "dangling", "fifo", "empty",
                                                                   "directory", "quarantine"))
        if target == "cache" and kind == "quarantine":  # quarantine symlinked outside, and a corrupt entry
            plant_kind(p / "quarantine", "outside_dir", outside)
            parts = [d for d in p.iterdir() if d.is_dir() and not d.is_symlink()]
            entry = sorted(parts[0].glob("*.xlk"))[0]
            entry.write_bytes(mutate_bytes(entry.read_bytes(), "bitflip", rng))
            return "cache/quarantine -> outside_dir, one entry bit-flipped"
        if target == "cache" and kind == "directory":  # a partition folder that is a symlink outside
            parts = [d for d in p.iterdir() if d.is_dir() and d.name != "quarantine"]
            plant_kind(parts[0], "outside_dir", outside)
            return "cache/partition -> outside_dir"
        plant_kind(p, kind, outside)
        return f"{target} -> {kind}"
    data = p.read_bytes()
    if target in ("manifest", "record"):
        if mutation in ("truncate", "bitflip"):
            new = mutate_bytes(data, mutation, rng)
        else:
            new = mutate_json_text(data.decode("utf-8"), mutation, rng).encode("utf-8")
    elif target == "weights":
        if mutation in ("truncate", "bitflip", "header_len"):
            new = mutate_bytes(data, mutation, rng)
        else:
            new = mutate_safetensors_header(data, mutation, rng)
    else:  # module
        if mutation == "bitflip" and not allow_flip_modules:
            mutation = "truncate"
        new = mutate_bytes(data, mutation if mutation in ("truncate", "bitflip") else "truncate", rng)
    p.write_bytes(new)
    return f"{target}: {mutation} ({len(data)} -> {len(new)} bytes)"


def pick(rng: random.Random, loading: bool) -> tuple[str, str]:
    target = rng.choice(TARGETS)
    if target in ("manifest", "record", "weights"):
        choices = JSON_MUTATIONS + (("header_len",) if target == "weights" else ())
    elif target == "module":
        choices = BYTE_MUTATIONS[:3]
    else:
        choices = ("kind",)
    return target, rng.choice(choices)


# -- running one case ------------------------------------------------------------------------------------------------

class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def run_case(bundle: Path, outside: Path, load: bool, timeout_s: int = 30) -> list[str]:
    """check_bundle, the CLI and (if ``load``) load_bundle on ``bundle``; returns findings (empty: fine)."""
    import warnings

    from xlakit.bundle import BundleError, check_bundle, load_bundle
    from xlakit.cli import main as cli_main

    findings = []
    before = snapshot(outside)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    step = "check_bundle"
    try:
        check_bundle(bundle)
        step = "cli"
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = cli_main(["bundle", "check", str(bundle)])
        if rc not in (0, 1, 2) or "XLAKIT_DEBUG" in err.getvalue():
            findings.append(f"cli: rc={rc} {err.getvalue().strip()[:200]}")
        if load:
            step = "load_bundle"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    load_bundle(bundle, progress=False).wait()  # the checks below need every program done
            except BundleError:
                pass
    except _Hang:
        findings.append(f"{step}: no answer within {timeout_s} s")
    except Exception as e:  # noqa: BLE001 - the finding
        findings.append(f"{step}: {type(e).__name__}: {str(e)[:200]}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if snapshot(outside) != before:
        findings.append("a file outside the bundle changed")
    return findings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load-every", type=int, default=20, help="run load_bundle on every Nth case")
    parser.add_argument("--programs", type=int, default=0,
                        help="instead: fuzz N random batch programs at padded and chunked sizes "
                             "(benchmarks/fuzz_bundle_rows.py)")
    parser.add_argument("--params", type=int, default=0,
                        help="instead: export, load and call N random parameter pytrees (0-d, bool, int, bf16, "
                             "fp8, int4, strided, jax.Arrays on any device, keys; benchmarks/fuzz_bundle_params.py)")
    parser.add_argument("--mem-gib", type=float, default=8.0,
                        help="address-space limit, so reading /dev/zero is a MemoryError finding, not an OOM kill")
    args = parser.parse_args(argv)
    if args.programs:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from fuzz_bundle_rows import run as fuzz_rows

        return 1 if fuzz_rows(args.programs, args.seed)["wrong"] else 0
    if args.params:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from fuzz_bundle_params import main as fuzz_params

        return fuzz_params(["--cases", str(args.params), "--seed", str(args.seed)])
    import resource

    limit = int(args.mem_gib * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    root = Path(tempfile.mkdtemp(prefix="fuzz-bundle-"))
    os.environ.setdefault("XLAKIT_CONFIG_DIR", str(root / "config"))
    os.environ.setdefault("XLAKIT_CACHE_DIR", str(root / "user-cache"))
    rng = random.Random(args.seed)
    pristine = make_pristine(root)
    outside = make_outside(root)
    counts: dict[str, int] = {}
    findings: list[str] = []
    start = time.perf_counter()
    work = root / "case"
    for i in range(args.cases):
        load = args.load_every > 0 and i % args.load_every == 0
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
            if work.exists():  # a planted FIFO or folder rmtree could not handle
                os.system(f"rm -rf {str(work)!r}")
        shutil.copytree(pristine, work, symlinks=True)
        target, mutation = pick(rng, load)
        try:
            what = apply(work, outside, target, mutation, rng, allow_flip_modules=not load)
        except (ValueError, IndexError, KeyError, TypeError):
            what = f"{target}: {mutation} (not applicable; unmutated)"
        key = f"{target}/{mutation}"
        counts[key] = counts.get(key, 0) + 1
        for f in run_case(work, outside, load):
            findings.append(f"case {i} [{what}]: {f}")
    took = time.perf_counter() - start
    loads = sum(1 for i in range(args.cases) if args.load_every > 0 and i % args.load_every == 0)
    print(f"{args.cases} cases ({loads} with load_bundle) in {took:.1f} s, seed {args.seed}: {len(findings)} findings")
    for key in sorted(counts):
        print(f"  {key}: {counts[key]}")
    for f in findings:
        print("FINDING", f)
    shutil.rmtree(root, ignore_errors=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
