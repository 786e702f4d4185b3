"""The raw local-folder Store keeps the same contract as the in-memory double (no envelopes, no JAX)."""

from __future__ import annotations

import os

import pytest

from xlakit.store import FolderStore, MemoryStore, ObjectRefused
from xlakit.store.base import Store


@pytest.fixture(params=["folder", "memory"])
def store(request, tmp_path):
    return FolderStore(tmp_path / "cache") if request.param == "folder" else MemoryStore()


def test_contract(store):
    assert isinstance(store, Store)
    assert store.get("p", "k", 100) is None and store.stat("p", "k") is None and not store.delete("p", "k")
    assert store.put("p", "k", b"first") is True
    assert store.put("p", "k", b"second") is False  # create-only
    assert store.get("p", "k", 100) == b"first"
    with pytest.raises(ObjectRefused, match="over the 3-byte bound"):
        store.get("p", "k", 3)
    st = store.stat("p", "k")
    assert st.size_bytes == 5 and st.partition == "p" and st.mtime > 0
    store.put("q", "other", b"x")
    assert sorted((o.partition, o.key) for o in store.list()) == [("p", "k"), ("q", "other")]
    assert [o.key for o in store.list("q")] == ["other"]
    assert store.delete("p", "k") is True and store.get("p", "k", 100) is None


def test_folder_is_created_private_and_tagged(tmp_path):
    store = FolderStore(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    store.put("p", "k", b"x")
    assert (tmp_path / "cache" / "CACHEDIR.TAG").read_bytes().startswith(b"Signature: 8a477f597d28d172789f06886806bc55")
    assert oct(os.stat(tmp_path / "cache" / "p").st_mode & 0o777) == "0o700"
    assert oct(os.stat(tmp_path / "cache" / "p" / "k.xlk").st_mode & 0o777) == "0o600"
    assert [n for n in os.listdir(tmp_path / "cache" / "p") if n.endswith(".tmp")] == []


def test_folder_refuses_links_and_other_kinds(tmp_path):
    store = FolderStore(tmp_path / "cache")
    store.put("p", "k", b"x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k.xlk").write_bytes(b"the user's")
    os.symlink(outside, tmp_path / "cache" / "linked")
    assert store.get("linked", "k", 100) is None  # a linked partition is never entered
    with pytest.raises(OSError):
        store.put("linked", "new", b"y")
    assert sorted(os.listdir(outside)) == ["k.xlk"] and store.partitions() == ["p"]
    entry = tmp_path / "cache" / "p" / "k.xlk"
    entry.unlink()
    os.mkfifo(entry)
    with pytest.raises(ObjectRefused, match="a FIFO"):
        store.get("p", "k", 100)
    assert store.delete("p", "k") and not os.path.lexists(entry)
