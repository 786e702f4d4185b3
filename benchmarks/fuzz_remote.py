"""Fuzz the remote tier against a hostile object store: it hangs, drips, ignores ``Range``, lies about lengths,
answers garbage or another object's bytes, and holds forged, damaged, foreign and renamed objects.

Each operation picks how the server behaves (:mod:`fake_s3` modes) and what to do: a cache read through the
tiered store exactly as :class:`~xlakit.cache.remote.SharedStore` wires it (``read_object`` then
``verify_object``), a synchronous upload (the coordination claimant's), or housekeeping (``prune`` by bytes,
``verify --fix``). Checked on every operation:

- **bound:** it returns within the deadline plus scheduling slack, whatever the server does (a missed deadline
  switches the tier off; a fresh tier is made for the next operation);
- **trust:** a read returns None or exactly the genuine object written under that key, never anything else;
- **deletion:** housekeeping never deletes a genuine object, another key's, a forged one carrying our public
  key id, or a renamed copy; only objects whose authenticated header names them (damaged after the header).

Run: ``python benchmarks/fuzz_store.py --ops 10000`` (or this file: ``--ops N --seed S --deadline S``); prints
operations, the slowest one against the bound, and findings. ``tests/test_fuzz_store.py`` runs a few hundred.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fake_s3 import FakeS3  # noqa: E402

from xlakit.store import seal  # noqa: E402
from xlakit.store.base import MemoryStore  # noqa: E402
from xlakit.store.envelope import MAGIC, key_id  # noqa: E402
from xlakit.store.remote import RemoteStore, read_object, verify_object  # noqa: E402
from xlakit.store.tiered import TieredStore  # noqa: E402

SECRET = b"remote-fuzz-secret-0123456789abc"
OTHER = b"another-teams-secret-0123456789!"
PART = "cpu-fuzz"
MAX_BYTES = 2 << 30
# (mode, weight): honest most of the time, so the hostile objects are read; slow modes cost a deadline each
MODES = (("ok", 70), ("ignore_range", 6), ("short", 5), ("long", 5), ("garbage", 5), ("wrong", 5), ("hang", 1),
         ("drip", 1))
OPS = (("read", 84), ("upload", 14), ("prune", 1), ("verify", 1))


def _key(name: str) -> str:
    return f"jit_{name}-{hashlib.sha256(name.encode()).hexdigest()}"


def _sealed(key: str, size: int, secret: bytes = SECRET, partition: str = PART) -> bytes:
    return seal({"key": key, "partition": partition, "name": "f", "created": 1.0}, os.urandom(size), secret)


@dataclass
class Report:
    operations: int = 0
    by_kind: Counter = field(default_factory=Counter)
    slowest_s: float = 0.0
    slowest: str = ""
    over_bound: int = 0
    trusted_wrong: int = 0
    wrongly_deleted: int = 0
    served: int = 0
    findings: list[str] = field(default_factory=list)


class World:
    """The server, its objects, and what each key must read as (``genuine[key]``: the bytes, or absent)."""

    def __init__(self, rng: random.Random, deadline_s: float) -> None:
        self.rng, self.deadline_s = rng, deadline_s
        self.server = FakeS3("ok", drip_s=deadline_s / 4, flood=8 << 20)
        self.remote = RemoteStore("s3://bkt/pre", storage_options=self.server.options(), timeout_s=deadline_s)
        self.genuine: dict[str, bytes] = {}
        self.protected: set[str] = set()  # must survive housekeeping
        self.tier: TieredStore | None = None
        self.plant()

    def _object(self, key: str) -> str:
        return f"bkt/pre/v1/{PART}/{key}"

    def plant(self) -> None:
        """(Re)write every kind of object: genuine small and over-256-KiB ones, foreign, forged, renamed, damaged."""
        objs = self.server.objects
        for name, size in (("small", 500), ("medium", 40_000), ("big", 400_000), ("huge", 1_200_000)):
            key = _key(name)
            blob = self.genuine.get(key) or _sealed(key, size)
            self.genuine[key] = blob
            objs[self._object(key)] = blob
            self.protected.add(key)
        extra = {
            _key("foreign"): _sealed(_key("foreign"), 3000, OTHER),
            _key("forged"): MAGIC + key_id(SECRET) + (16).to_bytes(4, "big") + os.urandom(600_000),
            _key("forged_len"): MAGIC + key_id(SECRET) + (0xFFFFFFFF).to_bytes(4, "big") + os.urandom(1000),
            _key("renamed"): self.genuine[_key("medium")],
            _key("other_part"): _sealed(_key("other_part"), 2000, partition="cpu-else"),
        }
        for key, blob in extra.items():
            objs[self._object(key)] = blob
            self.protected.add(key)
        big = bytearray(_sealed(_key("damaged"), 300_000))
        big[-5] ^= 0x40  # payload bit flip after an authentic header: the only kind housekeeping may delete
        objs[self._object(_key("damaged"))] = bytes(big)
        trunc = self.genuine[_key("big")][:-1000]
        objs[self._object(_key("truncated"))] = trunc  # names "big" in its header: a renamed, cut copy

    def fresh_tier(self) -> TieredStore:
        if self.tier is not None and self.tier.remote_on:
            with self.tier._lock:
                self.tier._refused.clear()  # read every object again, not the remembered refusal
            self.tier.local = MemoryStore()
            return self.tier
        if self.tier is not None:
            self.tier.close(timeout_s=0)
        self.tier = TieredStore(MemoryStore(), self.remote, timeout_s=self.deadline_s,
                                verify=lambda b, p, k: verify_object(b, p, k, SECRET),
                                reader=lambda p, k, n: read_object(self.remote, p, k, n, SECRET))
        return self.tier

    def close(self) -> None:
        if self.tier is not None:
            self.tier.close(timeout_s=0)
        self.server.stop()


def _pick(rng: random.Random, table) -> str:
    return rng.choices([t[0] for t in table], weights=[t[1] for t in table])[0]


def one_op(world: World, report: Report, slack_s: float) -> None:
    from xlakit.cache import remote_maintenance as rm

    rng = world.rng
    mode, op = _pick(rng, MODES), _pick(rng, OPS)
    if op in ("prune", "verify") and mode in ("hang", "drip"):
        mode = "ok"  # housekeeping is a command run by hand, with the backend's own timeouts; reads are bounded
    keys = sorted(world.genuine) + sorted(world.protected - set(world.genuine)) + [_key("damaged"),
                                                                                   _key("truncated"), _key("none")]
    # one draw whatever the number of keys (uploads that beat the deadline add keys, and rng.choice's draws
    # depend on that number): the modes and operations a seed meets do not depend on the machine's speed
    key = keys[int(rng.random() * len(keys))]
    world.server.mode = mode
    tier = world.fresh_tier()
    start = time.perf_counter()
    label = f"{op}/{mode}"
    try:
        if op == "read":
            got = tier.get(PART, key, MAX_BYTES)
            if got is not None:
                report.served += 1
                if got != world.genuine.get(key):
                    report.trusted_wrong += 1
                    report.findings.append(f"{label}: {key} served {len(got)} bytes that are not its object")
        elif op == "upload":
            new = _key(f"new{rng.randrange(1 << 30)}")
            blob = _sealed(new, rng.choice((100, 5000, 300_000)))
            tier.put(PART, new, blob, sync=True)
            if world.server.objects.get(world._object(new)) not in (None, blob):
                report.findings.append(f"{label}: {new} stored other bytes than uploaded")
            if world.server.objects.get(world._object(new)) == blob:
                world.genuine[new] = blob
        else:
            present = {k for k in world.protected | set(world.genuine) if world._object(k) in world.server.objects}
            try:
                if op == "prune":
                    rm.prune(world.remote, SECRET, max_bytes=rng.choice((0, 10**6, 10**12)))
                else:
                    rm.verify(world.remote, SECRET, fix=True)
            except OSError:
                pass  # a listing the server garbled: the command fails, deleting nothing
            gone = [k for k in present if world._object(k) not in world.server.objects]
            if op == "prune":
                gone = [k for k in gone if k not in world.genuine]  # prune may delete our own, never the others
            if gone:
                report.wrongly_deleted += len(gone)
                report.findings.append(f"{label}: deleted {sorted(gone)[:3]}")
            world.plant()
    except Exception as e:  # noqa: BLE001 - every operation must fail open
        report.findings.append(f"{label}: raised {type(e).__name__}: {e}"[:300])
    elapsed = time.perf_counter() - start
    bound = world.deadline_s + slack_s
    if op in ("read", "upload") and elapsed > bound:
        report.over_bound += 1
        report.findings.append(f"{label}: took {elapsed:.2f} s, over the {bound:.2f} s bound")
    if elapsed > report.slowest_s and op in ("read", "upload"):
        report.slowest_s, report.slowest = elapsed, label
    report.operations += 1
    report.by_kind[label] += 1


def run(ops: int, seed: int = 0, deadline_s: float = 1.0, slack_s: float = 1.0) -> Report:
    """``ops`` operations against a fresh hostile server; the report counts what went wrong (all zeros: none)."""
    report = Report()
    world = World(random.Random(seed), deadline_s)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(ops):
                one_op(world, report, slack_s)
    finally:
        world.close()
    return report


def print_report(report: Report, seconds: float, deadline_s: float, slack_s: float) -> None:
    print(f"remote-store fuzz: {report.operations} operations in {seconds:.0f} s "
          f"(deadline {deadline_s} s, bound {deadline_s + slack_s} s)")
    print(f"  reads served {report.served}; slowest read/upload {report.slowest_s:.2f} s ({report.slowest})")
    print(f"  over the bound: {report.over_bound}; trusted wrong objects: {report.trusted_wrong}; "
          f"protected objects deleted: {report.wrongly_deleted}; findings: {len(report.findings)}")
    for text in report.findings[:20]:
        print("   ", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deadline", type=float, default=1.0, help="seconds per remote operation")
    parser.add_argument("--slack", type=float, default=1.0, help="seconds of scheduling slack over the deadline")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    report = run(args.ops, args.seed, args.deadline, args.slack)
    print_report(report, time.perf_counter() - t0, args.deadline, args.slack)
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
