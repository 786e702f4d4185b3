"""What a hostile bucket costs a process: seconds for a hung and a dripping server, bytes for one that ignores
``Range`` and for a forged object, against the fake S3 endpoint of benchmarks/fake_s3.py (127.0.0.1, s3fs).

Run: ``python benchmarks/remote_deadline.py [--deadline 30]`` (``XLAKIT_CACHE_REMOTE_TIMEOUT_S``; the default
30 s takes about a minute). Prints one line per scenario: measured against the stated bound."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fake_s3 import FakeS3  # noqa: E402

SECRET = b"remote-deadline-bench-secret-0123"
PART = "cpu-bench"


def _key(i: int) -> str:
    return f"jit_f-{i:064x}"


def _shared(tmp: str, srv: FakeS3):
    from xlakit.cache.remote import SharedStore
    from xlakit.events import EventLog

    return SharedStore(os.path.join(tmp, "cache"), remote="s3://bkt/pre", storage_options=srv.options(),
                       secret=SECRET, log=EventLog())


def black_hole(tmp: str) -> float:
    """A two-program run against a bucket that accepts and never answers: read, claimant's sync upload, read,
    background upload, close. Seconds in all."""
    srv = FakeS3("hang")
    try:
        store = _shared(tmp, srv)
        t0 = time.perf_counter()
        store.layer.get(PART, _key(1))
        with store.sync_uploads():
            store.put(PART, _key(1), {"name": "f", "compile_s": 3.0}, b"x" * 1000)
        store.layer.get(PART, _key(2))
        store.put(PART, _key(2), {"name": "g", "compile_s": 3.0}, b"y" * 1000)
        store.close()
        return time.perf_counter() - t0
    finally:
        srv.stop()


def drip(tmp: str) -> float:
    """The claimant's synchronous upload to a server sending one byte every 2 s. Seconds."""
    srv = FakeS3("drip", drip_s=2.0)
    try:
        store = _shared(tmp, srv)
        store.tier.ready(120)
        t0 = time.perf_counter()
        with store.sync_uploads():
            store.put(PART, _key(3), {"name": "f", "compile_s": 3.0}, b"x" * 1000)
        took = time.perf_counter() - t0
        store.close(timeout_s=0)
        return took
    finally:
        srv.stop()


def flood(mode: str) -> tuple[int, int]:
    """(bytes the server got out, bytes it offered) when a reader reads one object: ``ignore_range`` streams a
    256 MiB body whatever the range; ``forged`` is an honest server holding a 256 MiB object carrying our
    magic and public key id."""
    from xlakit.store.base import ObjectRefused
    from xlakit.store.envelope import MAGIC, key_id
    from xlakit.store.remote import RemoteStore, read_object

    size = 256 << 20
    srv = FakeS3("ok" if mode == "forged" else "ignore_range", flood=size)
    try:
        remote = RemoteStore("s3://bkt/pre", storage_options=srv.options())
        if mode == "forged":
            # planted on the server directly: the fake endpoint speaks no multipart upload
            srv.objects[f"bkt/pre/v1/{PART}/{_key(4)}"] = MAGIC + key_id(SECRET) + (16).to_bytes(4, "big") + bytes(size)
        srv.sent = 0
        try:
            read_object(remote, PART, _key(4), 2 << 30, SECRET)
        except ObjectRefused:
            pass
        time.sleep(0.5)
        return srv.sent, size
    finally:
        srv.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deadline", type=float, default=30.0, help="XLAKIT_CACHE_REMOTE_TIMEOUT_S, seconds")
    args = parser.parse_args()
    os.environ["XLAKIT_CACHE_REMOTE_TIMEOUT_S"] = str(args.deadline)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        hole = black_hole(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        dripped = drip(tmp)
    sent, offered = flood("ignore_range")
    forged, size = flood("forged")
    bound = f"bound {args.deadline:g} s"
    print(f"deadline {args.deadline:g} s (XLAKIT_CACHE_REMOTE_TIMEOUT_S)")
    print(f"black-holed bucket, two-program run (2 reads, 2 uploads, close): {hole:6.1f} s   {bound}")
    print(f"dripping server (1 byte / 2 s), synchronous upload:             {dripped:6.1f} s   {bound}")
    print(f"server ignoring Range, one read of a {offered >> 20} MiB body: {sent / 2**20:7.1f} MiB got out "
          "(socket buffers)")
    print(f"forged {size >> 20} MiB object with our key id, one read:    {forged / 2**10:7.1f} KiB pulled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
