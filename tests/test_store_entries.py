"""The entry layer over any Store, proven on the in-memory double (no disk, no JAX)."""

from __future__ import annotations

import pytest

from xlakit.store import EntryLayer, MemoryStore, ObjectRefused, seal
from xlakit.store.base import Store
from xlakit.store.entries import check_expect, entry_info

SECRET = b"entries-test-secret-32-bytes!!!!"
OTHER = b"another-users-secret-32-bytes!!!"
PART = "cpu-test"


@pytest.fixture
def mem():
    return MemoryStore()


def layer(store, secret=SECRET, **kw) -> EntryLayer:
    return EntryLayer(store, lambda: secret, **kw)


def test_memory_store_is_a_store():
    assert isinstance(MemoryStore(), Store)


def test_put_then_get_is_a_hit_with_the_sealed_header(mem):
    entries = layer(mem)
    res = entries.put(PART, "k1", {"name": "f", "environment": {"platform": "cpu"}}, b"payload" * 10)
    assert res.stored and res.reason is None and res.size_bytes == len(mem.objects[(PART, "k1")][0])
    assert res.header["key"] == "k1" and res.header["partition"] == PART and res.header["raw_bytes"] == 70
    got = entries.get(PART, "k1", expect={"platform": "cpu"})
    assert got.hit and got.payload == b"payload" * 10 and got.header["name"] == "f"


def test_put_is_create_only(mem):
    entries = layer(mem)
    assert entries.put(PART, "k", {}, b"first").stored
    again = entries.put(PART, "k", {}, b"second")
    assert not again.stored and again.reason == "already exists"
    assert entries.get(PART, "k").payload == b"first"


def test_absent_and_expectation_mismatch(mem):
    entries = layer(mem)
    assert entries.get(PART, "nope").status == "absent"
    entries.put(PART, "k", {"environment": {"platform": "gpu"}}, b"x")
    got = entries.get(PART, "k", expect={"platform": "cpu"})
    assert got.status == "mismatch" and "platform: entry says 'gpu'" in got.reason
    assert (PART, "k") not in mem.objects  # a tier without quarantine: rejected objects are deleted


def test_tampered_object_is_unauthenticated_and_removed(mem):
    entries = layer(mem)
    entries.put(PART, "k", {"name": "f"}, b"x" * 100)
    blob, t = mem.objects[(PART, "k")]
    bad = bytearray(blob)
    bad[60] ^= 0x01  # inside the header JSON
    mem.objects[(PART, "k")] = (bytes(bad), t)
    got = entries.get(PART, "k")
    assert got.status == "unauthenticated" and "header MAC" in got.reason
    assert (PART, "k") not in mem.objects


def test_other_key_is_a_foreign_miss_left_in_place(mem):
    layer(mem, OTHER).put(PART, "k", {"name": "f"}, b"x")
    got = layer(mem).get(PART, "k")
    assert got.status == "foreign" and "signed with another key" in got.reason
    assert (PART, "k") in mem.objects  # the other user's entry survives


def test_entry_filed_under_another_key_is_corrupt(mem):
    blob = seal({"key": "other", "partition": PART}, b"x", SECRET)
    mem.put(PART, "k", blob)
    got = layer(mem).get(PART, "k")
    assert got.status == "corrupt" and "header names key 'other'" in got.reason


def test_refused_and_failing_tiers(mem):
    class Refusing(MemoryStore):
        def get(self, partition, key, max_bytes):
            raise ObjectRefused("a FIFO, refused")

    class Broken(MemoryStore):
        def get(self, partition, key, max_bytes):
            raise OSError("disk on fire")

    refusing = Refusing()
    refusing.put(PART, "k", b"whatever")
    got = layer(refusing).get(PART, "k")
    assert got.status == "corrupt" and got.reason == "a FIFO, refused" and (PART, "k") not in refusing.objects
    got = layer(Broken()).get(PART, "k")
    assert got.status == "error" and got.reason == "OSError: disk on fire"


def test_size_bound_is_passed_to_the_tier(mem):
    entries = layer(mem, max_entry_bytes=200)
    entries.put(PART, "big", {}, bytes(range(256)) * 4)  # incompressible enough to exceed 200 bytes
    got = entries.get(PART, "big")
    assert got.status == "corrupt" and "over the 200-byte bound" in got.reason


def test_secret_failure_is_an_error_not_an_exception(mem):
    def no_secret():
        raise OSError("no secret here")

    entries = EntryLayer(mem, no_secret)
    assert entries.put(PART, "k", {}, b"x").reason == "OSError: no secret here"
    mem.put(PART, "k", seal({"key": "k", "partition": PART}, b"x", SECRET))
    assert entries.get(PART, "k").status == "error"


def test_entry_info_drops_implausible_numbers(tmp_path):
    info = entry_info(PART, "stem", tmp_path / "x.xlk", 10, 5.0,
                      {"key": "k", "name": "f", "created": 1e300, "compile_s": -1.0})
    assert info.created is None and info.compile_s is None and info.key == "k" and info.name == "f"
    info = entry_info(PART, "stem", tmp_path / "x.xlk", 10, float("nan"), {"error": "bad", "name": "f"})
    assert info.name is None and info.key == "stem" and info.last_used == 0.0


def test_check_expect_reads_environment_first():
    header = {"partition": PART, "environment": {"platform": "cpu"}, "platform": "gpu", "name": "f"}
    assert check_expect(header, PART, {"platform": "cpu", "name": "f"}) is None
    assert "belongs to partition" in check_expect(header, "other", None)
