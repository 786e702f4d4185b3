"""Fuzz the local store and the `xlakit cache` commands with mutated entries, headers and file kinds.

Each case copies a small valid cache (three entries in two partitions), applies one mutation, then runs
every public operation (get, entries, verify, prune, clear, put, touch, remove, total_bytes) and the CLI's
``cache ls|stats|verify|prune|clear --json``, and checks:

- nothing is trusted that should not be: a hit returns exactly the payload written under that key, and a
  listed name is one that was written;
- no exception escapes other than the documented ones (NotACacheFolder when the tag itself is mutated);
- no hang: each case runs under a SIGALRM timeout;
- nothing outside the cache folder changes: a sentinel folder (the target of planted links) is hashed
  before and after;
- every ``--json`` output is strict JSON (no NaN/Infinity);
- the jaxlib fingerprint memo planted as a FIFO, a link (to /dev/zero or a user file) or deeply nested JSON
  gives the same fingerprint as no memo, at once; a folder planted at ``.lock`` or an entry's name is out of
  the way after the operation that met it; a hard-linked ``.used`` never has its target touched (the
  sentinel's mtimes are hashed); killed writers' root-level temps are gone after prune/verify/clear.

Run: ``python benchmarks/fuzz_store.py [--cases 10000] [--seed 0]``; prints the count and any findings.
``--ops 10000`` fuzzes the remote tier against a hostile object store instead (:mod:`fuzz_remote`).
``tests/test_fuzz_store.py`` drives the same :func:`run_case` from hypothesis.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import io
import json
import os
import random
import shutil
import signal
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xlakit.store import LocalStore, NotACacheFolder, key_id

SECRET = b"fuzz-secret-of-thirty-two-bytes!"
OTHER = b"another-users-secret-32-bytes!!!"
PARTS = ("cpu-a", "cpu-b")
ENTRIES = {("cpu-a", "k1"): b"payload one " * 20, ("cpu-a", "k2"): b"payload two " * 30,
           ("cpu-b", "k3"): b"payload three " * 10}
NAMES = {"f1", "f2", "f3"}
TIMEOUT_S = 10

KINDS = ("truncate", "bitflip", "header", "old_header", "other_key", "fifo", "link_file", "link_dir",
         "directory", "dev_zero", "sparse", "link_partition", "link_quarantine", "link_used", "link_lock",
         "link_note", "junk_file", "dead_temp", "remove_tag", "memo_fifo", "memo_link", "memo_nested",
         "redos_info", "lock_dir", "hard_used", "root_temp")
ROOT_TEMPS = (".jaxlib_fingerprints.json.999999999.abcd.tmp", ".module_hashes.json.999999999.abcd.tmp")
TARGETS = ("k1", "k2", "k3")


@dataclass
class Case:
    """One mutation: ``kind`` applied to entry ``target``; ``position``/``bit`` pick the byte; ``header`` is
    the raw header text for the header kinds; ``ops_seed`` picks the operations' order and arguments."""

    kind: str
    target: str = "k1"
    position: int = 0
    bit: int = 0
    header: bytes = b"{}"
    ops_seed: int = 0


@dataclass
class Result:
    findings: list[str] = field(default_factory=list)
    operations: int = 0


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def _signed(header: bytes, payload: bytes, secret: bytes) -> bytes:
    fixed = b"XLAKIT\x00\x02" + key_id(secret) + struct.pack(">I", len(header))
    prefix = fixed + hmac.new(secret, b"xlakit header\x00" + fixed + header, hashlib.sha256).digest() + header
    return prefix + hmac.new(secret, prefix + payload, hashlib.sha256).digest() + payload


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirs, files in sorted(os.walk(root)):
        for name in sorted(files + dirs):
            p = Path(dirpath, name)
            st = os.lstat(p)
            h.update(f"{p.relative_to(root)}:{st.st_mode}:{st.st_size}:{st.st_mtime_ns}".encode())
            if p.is_file() and not p.is_symlink():
                h.update(p.read_bytes())
    return h.hexdigest()


def build_template(base: Path) -> Path:
    """A valid cache with three entries, made once and copied per case."""
    root = base / "template"
    store = LocalStore(root, secret=SECRET)
    for i, ((part, key), payload) in enumerate(sorted(ENTRIES.items())):
        res = store.put(part, key, {"name": f"f{i + 1}", "compile_s": 0.5, "environment": {"platform": "cpu"}},
                        payload)
        assert res.stored, res.reason
    store.write_partition_info("cpu-a", {"platform": "cpu"})
    return root


def _partition_of(target: str) -> str:
    return "cpu-b" if target == "k3" else "cpu-a"


def mutate(case: Case, root: Path, sentinel: Path) -> None:
    """Apply ``case`` to the cache at ``root``; links point into ``sentinel``."""
    part = _partition_of(case.target)
    entry = root / part / f"{case.target}.xlk"
    kind = case.kind
    if kind in ("truncate", "bitflip"):
        data = bytearray(entry.read_bytes())
        pos = case.position % max(1, len(data))
        if kind == "truncate":
            del data[pos:]
        else:
            data[pos] ^= 1 << (case.bit % 8)
        entry.write_bytes(bytes(data))
    elif kind == "header":
        entry.write_bytes(_signed(case.header, b"\x28\xb5\x2f\xfd" + bytes(8), SECRET))
    elif kind == "old_header":
        entry.write_bytes(b"XLAKIT\x00\x01" + struct.pack(">I", len(case.header)) + case.header + bytes(32))
    elif kind == "other_key":
        store = LocalStore(root, secret=OTHER)
        entry.unlink()
        store.put(part, case.target, {"name": "theirs"}, b"their payload")
    elif kind in ("fifo", "link_file", "link_dir", "directory", "dev_zero", "sparse"):
        entry.unlink()
        if kind == "fifo":
            os.mkfifo(entry)
        elif kind == "link_file":
            os.symlink(sentinel / "precious.txt", entry)
        elif kind == "link_dir":
            os.symlink(sentinel, entry)
        elif kind == "directory":
            entry.mkdir()
            (entry / "inside.xlk").write_bytes(b"x")
        elif kind == "dev_zero":
            os.symlink("/dev/zero", entry)
        else:
            with open(entry, "wb") as f:
                f.write(b"XLAKIT\x00\x02")
            os.truncate(entry, 4 * 2**30)
    elif kind == "link_partition":
        os.symlink(sentinel, root / "cpu-linked")
    elif kind == "link_quarantine":
        shutil.rmtree(root / "quarantine", ignore_errors=True)
        os.symlink(sentinel, root / "quarantine")
    elif kind == "link_used":
        used = entry.with_suffix(".used")
        used.unlink()
        os.symlink(sentinel / "precious.txt", used)
    elif kind == "link_lock":
        lock = root / ".lock"
        if os.path.lexists(lock):
            lock.unlink()
        os.symlink(sentinel / "precious.txt", lock)
    elif kind == "link_note":
        q = root / "quarantine" / part
        q.mkdir(parents=True, exist_ok=True)
        now = int(time.time() * 1000)
        for ms in range(now - 50, now + 3000):
            os.symlink(sentinel / "precious.txt", q / f"{case.target}.{ms}.reason.txt")
        data = bytearray(entry.read_bytes())
        data[-1] ^= 1
        entry.write_bytes(bytes(data))
    elif kind == "junk_file":
        (root / part / "notes.txt").write_text("a user's file in a partition")
    elif kind == "dead_temp":
        (root / part / f".{case.target}.xlk.999999999.abcd.tmp").write_bytes(b"t" * 5000)
    elif kind in ("memo_fifo", "memo_link", "memo_nested"):
        memo = root / "jaxlib_fingerprints.json"
        if kind == "memo_fifo":
            os.mkfifo(memo)
        elif kind == "memo_link":
            os.symlink("/dev/zero" if case.bit % 2 else sentinel / "precious.txt", memo)
        else:
            depth = [100, 100_000][case.bit % 2]
            memo.write_bytes(b'{"version":1,"files":' + b"[" * depth + b"]" * depth + b"}")
    elif kind == "redos_info":
        # a quote then many escaped quotes: quadratic for the old string regex (128 kB took 35 s)
        n = 50_000 + case.position * 50
        (root / part / "partition.json").write_bytes(b'{"a":"' + b'\\"' * n + (b'"}' if case.bit % 2 else b""))
    elif kind == "lock_dir":
        lock = root / ".lock"
        if os.path.lexists(lock):
            lock.unlink()
        (lock / "sub").mkdir(parents=True)
        if case.bit % 2:
            (lock / "sub" / "user.txt").write_text("a user's file")
    elif kind == "hard_used":
        used = entry.with_suffix(".used")
        used.unlink()
        os.link(sentinel / "precious.txt", used)
    elif kind == "root_temp":
        for name in ROOT_TEMPS:
            (root / name).write_bytes(b"t" * 5000)
    elif kind == "remove_tag":
        (root / "CACHEDIR.TAG").unlink()
        (root / "README.md").write_text("not xlakit's")
    else:
        raise ValueError(kind)


def _cli(argv: list[str]) -> tuple[int, str]:
    from xlakit.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, out.getvalue()


def _strict(text: str) -> None:
    def refuse(constant):
        raise ValueError(constant)

    json.loads(text, parse_constant=refuse)


def _check_get(store: LocalStore, part: str, key: str, result: Result) -> None:
    found = store.get(part, key, expect={"platform": "cpu"})
    allowed = {ENTRIES.get((part, key)), ENTRIES_WRITTEN.get((part, key))}
    if found.status == "hit" and found.payload not in allowed:
        result.findings.append(f"get({part}, {key}) trusted a payload that was never written under that key")


def run_ops(root: Path, case: Case, result: Result) -> None:
    rng = random.Random(case.ops_seed)
    capped = rng.random() < 0.5
    store = LocalStore(root, secret=SECRET, max_bytes=40_000 if capped else None, max_entry_bytes=1 << 20,
                       lock_timeout_s=2.0)
    tolerated = (NotACacheFolder,) if case.kind == "remove_tag" else ()
    ops = ["get", "entries", "verify", "prune", "clear", "put", "touch", "remove", "total", "cli_ls", "cli_stats",
           "cli_verify", "cli_prune", "cli_clear", "memo"]
    rng.shuffle(ops)
    for op in ops[: rng.randint(4, len(ops))]:
        result.operations += 1
        try:
            if op == "get":
                for part, key in ENTRIES:
                    _check_get(store, part, key, result)
            elif op == "entries":
                for info in store.entries():
                    if info.name is not None and info.name not in NAMES | {"g"}:
                        result.findings.append(f"entries() listed an untrusted name {info.name!r}")
            elif op == "verify":
                store.verify()
            elif op == "prune":
                store.prune(rng.choice([0, 1000, 10**9]))
            elif op == "clear":
                store.clear(rng.choice([None, "cpu-a", "cpu-b"]))
            elif op == "put":
                key = rng.choice(TARGETS)
                res = store.put(_partition_of(key), key, {"name": "g"}, b"fresh")
                if res.stored:
                    ENTRIES_WRITTEN[(_partition_of(key), key)] = b"fresh"
            elif op == "touch":
                store.touch(_partition_of(case.target), case.target)
            elif op == "remove":
                store.remove(_partition_of(case.target), case.target)
            elif op == "total":
                if store.total_bytes() < 0:
                    result.findings.append("total_bytes() < 0")
            elif op == "memo":
                _check_memo(root, result)
            else:
                cmd = op.removeprefix("cli_")
                extra = {"prune": ["--max-bytes", "1k"], "clear": ["--yes"]}.get(cmd, [])
                code, out = _cli(["cache", cmd, "--path", str(root), "--json", *extra])
                if code == 0 or (cmd == "verify" and code == 1):
                    _strict(out)
                elif not (code == 2 and tolerated):
                    result.findings.append(f"`cache {cmd}` exited {code}")
        except tolerated:
            continue
        except _Timeout:
            raise
        except Exception as e:  # noqa: BLE001 - a finding, not a crash of the fuzzer
            result.findings.append(f"{op} raised {type(e).__name__}: {str(e)[:120]}")
            continue
        _check_after(op, root, case, capped, result)


def _check_memo(root: Path, result: Result) -> None:
    from xlakit._jax import fingerprint

    libs = root.parent / "libs"
    if not libs.exists():
        (libs / "jaxlib").mkdir(parents=True)
        (libs / "jaxlib" / "_core.so").write_bytes(b"\x7fELF fake library")
    memo = root / "jaxlib_fingerprints.json"
    if fingerprint._fingerprint_dirs([libs / "jaxlib"], memo) != fingerprint._fingerprint_dirs([libs / "jaxlib"], None):
        result.findings.append("the memo changed the jaxlib fingerprint")


def _check_after(op: str, root: Path, case: Case, capped: bool, result: Result) -> None:
    """The kind-specific promises, checked after an operation that met the planted file."""
    entry = root / _partition_of(case.target) / f"{case.target}.xlk"
    if case.kind == "directory" and op == "get" and entry.is_dir() and not entry.is_symlink():
        result.findings.append("a folder at an entry's name survived a read")
    met_lock = op in ("prune", "clear", "cli_prune", "cli_clear") or (op == "put" and capped)
    if case.kind == "lock_dir" and met_lock and (root / ".lock").is_dir():
        result.findings.append(f"a folder at .lock survived {op}")
    sweeps = op in ("prune", "verify", "clear", "cli_prune", "cli_verify", "cli_clear")
    if case.kind == "root_temp" and sweeps and any(os.path.lexists(root / name) for name in ROOT_TEMPS):
        result.findings.append(f"a killed writer's root-level temp survived {op}")


ENTRIES_WRITTEN: dict[tuple[str, str], bytes] = {}


def run_case(case: Case, template: Path, workdir: Path) -> Result:
    """Run one case in a fresh copy of ``template`` under ``workdir``; returns the findings."""
    result = Result()
    root = workdir / "cache"
    sentinel = workdir / "sentinel"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    shutil.copytree(template, root, symlinks=True)
    (sentinel / "sub").mkdir(parents=True)
    (sentinel / "precious.txt").write_text("precious user data\n")
    (sentinel / "sub" / "x.xlk").write_text("looks like an entry but is the user's")
    (sentinel / "k1.xlk").write_text("user file with an entry's name")
    before = _digest(sentinel)
    ENTRIES_WRITTEN.clear()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    try:
        mutate(case, root, sentinel)
        run_ops(root, case, result)
    except _Timeout:
        result.findings.append(f"hang: case did not finish within {TIMEOUT_S} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if _digest(sentinel) != before:
        result.findings.append("a file outside the cache folder changed")
    return result


def random_header(rng: random.Random) -> bytes:
    """Header text with nesting, huge and non-finite numbers, wrong types (for the header kinds)."""
    choice = rng.randrange(7)
    if choice == 0:
        depth = rng.choice([10, 65, 1000, 100_000])
        return b"[" * depth + b"]" * depth
    if choice == 1:
        return b'{"created":' + b"9" * rng.choice([19, 20, 400, 5000]) + b"}"
    if choice == 2:
        return b'{"created":' + rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e308", b"-1e400"]) + b"}"
    if choice == 3:
        fields = {"key": rng.choice(["k1", ["k1"], 3, None]), "partition": rng.choice(["cpu-a", 1, {}]),
                  "format_version": rng.choice([2, "2", 1.0]), "payload_bytes": rng.choice([12, -1, "x", 2**62]),
                  "raw_bytes": rng.choice([0, -5, 2**40, True]), "payload_sha256": rng.choice(["00", 5]),
                  "name": rng.choice(["f1", 7, ["x"]])}
        return json.dumps(fields).encode()
    if choice == 4:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if choice == 5:
        if rng.random() < 0.5:
            return b'{"a":"' + b'\\"' * rng.randrange(1, 200_000) + rng.choice([b'"}', b""])  # escaped quotes
        return b'{"a":"' + b"\\" * rng.randrange(1, 9) + b'"}'
    return b'{"key":"k1","created":' + str(rng.uniform(-1e18, 1e18)).encode() + b"}"


def random_case(rng: random.Random) -> Case:
    return Case(kind=rng.choice(KINDS), target=rng.choice(TARGETS), position=rng.randrange(4096),
                bit=rng.randrange(8), header=random_header(rng), ops_seed=rng.randrange(2**31))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ops", type=int, default=None,
                        help="instead: N operations against a hostile object store (benchmarks/fuzz_remote.py)")
    parser.add_argument("--deadline", type=float, default=1.0, help="with --ops: seconds per remote operation")
    args = parser.parse_args()
    if args.ops is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import fuzz_remote

        return fuzz_remote.main(["--ops", str(args.ops), "--seed", str(args.seed), "--deadline", str(args.deadline)])
    os.environ["XLAKIT_CACHE_SECRET"] = SECRET.decode()  # the CLI reads the same key as the cases
    rng = random.Random(args.seed)
    findings: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    operations = 0
    start = time.perf_counter()
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # tmpfs: fsync costs nothing
    with tempfile.TemporaryDirectory(prefix="xlakit-fuzz-", dir=shm) as tmp:
        os.environ["XLAKIT_CONFIG_DIR"] = str(Path(tmp) / "config")
        template = build_template(Path(tmp))
        for i in range(args.cases):
            case = random_case(rng)
            by_kind[case.kind] = by_kind.get(case.kind, 0) + 1
            result = run_case(case, template, Path(tmp) / "case")
            operations += result.operations
            for f in result.findings:
                label = f"{case.kind}: {f}"
                if label not in findings:
                    print(f"FINDING (case {i}): {label}", flush=True)
                findings[label] = findings.get(label, 0) + 1
            if (i + 1) % 1000 == 0:
                print(f"{i + 1} cases, {operations} operations, {sum(findings.values())} findings, "
                      f"{time.perf_counter() - start:.0f} s", flush=True)
    took = time.perf_counter() - start
    print(f"\n{args.cases} cases ({operations} operations) in {took:.0f} s; {len(KINDS)} mutation kinds: "
          + ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())))
    print(f"findings: {sum(findings.values())}" + "".join(f"\n  {n} x {label}" for label, n in findings.items()))
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
