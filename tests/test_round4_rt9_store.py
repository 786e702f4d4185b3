"""A user's own files in the cache folder are never deleted, evicted or quarantined (round 4, red team 9).

Fault: a user's ``logs/notes.xlk`` in their own folder inside the cache folder was deleted by ``xlakit cache prune``
("evicted logs/(unreadable: bad magic b'keep\\n'...)"), moved to the quarantine by ``cache verify``, evicted by
``enable_cache(max_bytes=...)``, and removed by ``cache clear --yes`` when the folder held only it, though the README
promises that such a folder is not a partition. Every valid-named folder was scanned as a partition, and any
``*.xlk`` in it was taken for an entry (``layout.holds_only_store_names``: a folder holding only ``*.xlk`` names
passed for one the store made). Now only the store's entries (:func:`xlakit.store.owned.is_store_entry`) in
partitions (:func:`xlakit.store.owned.is_partition`) are ever removed; everything else is counted against the cap as
foreign bytes and said ("left alone"). Each operation is proven on a user's ``notes.xlk``, ``other.xlk`` and a file
named exactly like an entry (``<name>-<64 hex>.xlk``) in a folder that is not a partition, and on real entries, which
still go. Only the last test runs JAX (a worker process with ``enable_cache(max_bytes=...)``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from cli_helpers import run

from xlakit.store import LocalStore
from xlakit.store.evict import counted_files, scan
from xlakit.store.layout import is_environment_partition
from xlakit.store.owned import is_entry_name, is_partition, is_store_entry, is_store_name

PART = "cpu-jaxlib0.10.2-x86_64-avx512-3f2a9c1e"
ENV = {"jax_version": "0.10.2", "jaxlib_version": "0.10.2", "platform": "cpu", "device_kinds": ["cpu"],
       "device_count": 1}
HEX = "0123456789abcdef" * 4
#: A user's own folder beside the partitions, as the red team made it.
USER = {"notes.xlk": b"keep\n", "other.xlk": b"other\n", f"jit_mine-{HEX}.xlk": b"my own file, named like an entry\n",
        "run.txt": b"run\n"}


def _key(i: int) -> str:
    """A key as xlakit's cache makes them: ``<program>-<sha256 hex>``."""
    return f"jit_f{i}-{hashlib.sha256(str(i).encode()).hexdigest()}"


def _put(store: LocalStore, key: str, size: int = 5000, partition: str = PART) -> None:
    header = {"name": key.rpartition("-")[0], "compile_s": 1.0, "environment": dict(ENV)}
    assert store.put(partition, key, header, os.urandom(size)).stored


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A cache with four real entries in an environment partition and the user's ``logs/`` beside them."""
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    store = LocalStore(tmp_path / "cache")
    store.write_partition_info(PART, ENV)
    for i in range(4):
        _put(store, _key(i))
        time.sleep(0.003)
    _user_folder(store.root / "logs")
    return store


def _user_folder(folder: Path, files: dict[str, bytes] = USER) -> None:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.is_dir() else {}


def _entries(store: LocalStore) -> set[str]:
    return {p.name for p in (store.root / PART).glob("*.xlk")}


# -- the four operations the red team named ----------------------------------------------------------------------

def test_prune_evicts_the_entries_and_no_file_of_the_users(store):
    evicted = store.prune(0)  # before: the three logs/*.xlk were "evicted" as unreadable entries
    assert {e.key for e in evicted} == {_key(i) for i in range(4)}
    assert _entries(store) == set() and _files(store.root / "logs") == USER
    assert not (store.root / "quarantine").exists()
    kinds = {rel: kind for kind, rel, _ in counted_files(store.root)}
    assert all(kinds[f"logs/{name}"] == "foreign" for name in USER)  # counted against the cap, as foreign bytes
    assert store.left_alone() == sorted(f"logs/{name}" for name in USER if name.endswith(".xlk"))


def test_cli_prune_says_what_it_left_alone(store, capsys):
    code, out, err = run(capsys, "cache", "prune", "--path", str(store.root), "--max-bytes", "0")
    assert code == 0 and "logs/" not in out and "Evicted 4 entries" in out, out
    assert _entries(store) == set() and _files(store.root / "logs") == USER
    assert "note: 3 files named like entries left alone: not the store's entries in an environment partition" in err
    assert "note:   logs/notes.xlk" in err and "files that are not xlakit's" in err and "logs/notes.xlk" in err, err
    code, out, _ = run(capsys, "cache", "prune", "--path", str(store.root), "--max-bytes", "0", "--json")
    assert json.loads(out)["left_alone"] == sorted(f"logs/{name}" for name in USER if name.endswith(".xlk"))


def test_verify_quarantines_a_damaged_entry_and_never_a_users_file(store, capsys):
    bad = store.root / PART / f"{_key(1)}.xlk"
    data = bytearray(bad.read_bytes())
    data[-3] ^= 0x40
    bad.write_bytes(bytes(data))
    results = {info.key: problem for info, problem in store.verify()}
    assert set(results) == {_key(i) for i in range(4)}  # before: notes, other and jit_mine-<hex> too
    assert results[_key(1)] and not bad.exists()
    assert [p.parent.name for p in (store.root / "quarantine").rglob("*.xlk")] == [PART]
    assert _files(store.root / "logs") == USER
    code, out, err = run(capsys, "cache", "verify", "--path", str(store.root))
    assert code == 0 and "3 entries verified" in out and "note:   logs/other.xlk" in err, (out, err)
    assert _files(store.root / "logs") == USER


def test_clear_leaves_a_folder_that_holds_only_a_notes_xlk(store, capsys):
    shutil.rmtree(store.root / "logs")
    _user_folder(store.root / "logs", {"notes.xlk": b"keep\n"})  # before: "a partition the store made"
    assert store.clear("logs") == 0 and _files(store.root / "logs") == {"notes.xlk": b"keep\n"}
    assert store.clear() == 4
    assert _files(store.root / "logs") == {"notes.xlk": b"keep\n"} and not (store.root / PART).exists()
    _put(store, _key(9))
    code, out, err = run(capsys, "cache", "clear", "--path", str(store.root), "--yes")
    assert code == 0 and "Removed 1 entries" in out and "note:   logs/notes.xlk" in err, (out, err)
    assert _files(store.root / "logs") == {"notes.xlk": b"keep\n"}
    code, _, err = run(capsys, "cache", "clear", "--path", str(store.root), "--partition", "logs", "--yes")
    assert code == 2 and "unknown partition 'logs'" in err


def test_every_operation_on_a_folder_of_the_users_with_all_three_names(store):
    """The three names together, and the rest of the user's folder, through every operation in turn."""
    for operation in (lambda: store.verify(), lambda: store.prune(0), lambda: store.cleanup_temp(0),
                      lambda: store.clear()):
        operation()
        assert _files(store.root / "logs") == USER


def test_a_capped_store_evicts_its_entries_around_a_users_folder(tmp_path, monkeypatch):
    """The local store's own eviction (a capped put): before, the user's files went first (least recently used)."""
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    store = LocalStore(tmp_path / "cache", max_bytes=60_000)
    store.write_partition_info(PART, ENV)
    _put(store, _key(0))
    _user_folder(store.root / "logs")
    for path in (store.root / "logs").iterdir():
        os.utime(path, (1_000_000, 1_000_000))  # the oldest files in the folder
    evicted = set()
    for i in range(1, 12):
        header = {"name": "jit_f", "environment": dict(ENV)}
        res = store.put(PART, _key(i), header, os.urandom(5000))
        assert res.stored, res.reason
        evicted |= {e.key for e in res.evicted}
        assert store.total_bytes() <= 60_000
        time.sleep(0.003)
    assert _key(0) in evicted and all(e.startswith("jit_f") for e in evicted)
    assert _files(store.root / "logs") == USER


# -- which folders are partitions, which files entries ---------------------------------------------------------------

def test_a_partition_is_made_for_an_environment_or_proven_by_an_entry_of_this_key(store, tmp_path):
    root = store.root
    assert is_environment_partition(root, PART)
    assert is_environment_partition(root, "gpu-sm90-jaxlib0.10.2-x86_64-avx512-0badcafe")
    assert is_environment_partition(root, "tpu-TPU_v5_lite-jaxlib0.10.2-x86_64-12345678")
    for name, info in [("logs", None), ("my-run-20240101", None), ("notes", b"not json"), ("listed", b"[1, 2]"),
                       ("deep", b"[" * 100_000)]:
        (root / name).mkdir(exist_ok=True)
        if info is not None:
            (root / name / "partition.json").write_bytes(info)
        assert not is_environment_partition(root, name), name
        assert not is_partition(root, name, lambda: store.secret), name
    (root / "described").mkdir()
    (root / "described" / "partition.json").write_text(json.dumps(ENV))
    assert is_environment_partition(root, "described")
    # A partition a LocalStore caller named: proven by an entry whose header names it and the file's key.
    _put(store, "x", partition="p2")
    assert not is_environment_partition(root, "p2") and is_partition(root, "p2", lambda: store.secret)
    assert not is_partition(root, "p2", lambda: b"another key's secret, 32 bytes!!")
    # A copy of a real entry dropped in the user's folder proves nothing: its header names another partition.
    shutil.copy(root / PART / f"{_key(0)}.xlk", root / "logs" / f"{_key(0)}.xlk")
    assert not is_partition(root, "logs", lambda: store.secret)
    assert store.clear() == 5  # the four in PART and p2's one
    assert _files(root / "logs") == {**USER, f"{_key(0)}.xlk": (root / "logs" / f"{_key(0)}.xlk").read_bytes()}


def test_entry_names_are_exactly_the_ones_the_store_writes():
    assert is_entry_name(f"jit_f-{HEX}.xlk") and is_entry_name(f"-{HEX}.xlk") and is_entry_name(f"model-{HEX}-b4.xlk")
    assert is_entry_name("a" * 80 + "-0123456789abcdef.xlk")  # a key over 150 characters, shortened
    for name in ("notes.xlk", "other.xlk", f".jit_f-{HEX}.xlk", f"jit_f-{HEX.upper()}.xlk", f"jit_f-{HEX}.used",
                 f"jit f-{HEX}.xlk", f"jit_f-{HEX[:-1]}.xlk", "a" * 79 + "-0123456789abcdef.xlk"):
        assert not is_entry_name(name), name
    assert is_store_name("k1.xlk") and is_store_name("notes.xlk")
    assert not is_store_name("my notes.xlk") and not is_store_name(".k.xlk") and not is_store_name("résumé.xlk")


def test_inside_a_partition_a_name_alone_proves_nothing_but_a_mark_or_the_magic_does(store):
    """A LocalStore caller's own keys (``k1``) are entries when the store's mark or magic says so; a user's
    ``notes.xlk`` dropped into a partition is not, and stays through prune, verify and clear."""
    pdir = store.root / PART
    (pdir / "notes.xlk").write_bytes(b"keep\n")
    _put(store, "k1")
    (pdir / "k2.xlk").write_bytes((pdir / "k1.xlk").read_bytes()[:40])  # xlakit's magic, then cut: an entry
    (pdir / "k3.xlk").write_bytes(b"garbled")
    (pdir / "k3.used").touch()  # the store's mark beside it
    names = {p.name for p in pdir.iterdir()}
    assert {n for n in names if is_store_entry(n, names, path=pdir / n)} == {f"{_key(i)}.xlk" for i in range(4)} | {
        "k1.xlk", "k2.xlk", "k3.xlk"}
    store.verify()
    assert (pdir / "notes.xlk").read_bytes() == b"keep\n" and not (pdir / "k2.xlk").exists()
    assert store.prune(0) and (pdir / "notes.xlk").read_bytes() == b"keep\n"
    assert not (pdir / "k3.xlk").exists() and not (pdir / "k1.xlk").exists()
    store.clear()
    files = _files(pdir)  # the description stays while a file not the store's is beside it (a user's folder?)
    assert files.pop("notes.xlk") == b"keep\n" and set(files) == {"partition.json"}


def test_a_users_folder_with_a_partition_json_of_theirs_keeps_its_files(store):
    """A red team's finding: a user's ``settings/`` holding their own ``partition.json`` (any JSON object) and a
    ``run-<64 hex>.xlk`` of plain text lost the file to prune / verify / eviction, and clear removed the folder.
    The name alone proves nothing (the store's entries start with its magic), and the description is removed
    only when nothing else is left."""
    settings = store.root / "settings"
    settings.mkdir()
    (settings / "partition.json").write_text('{"theme": "dark"}')
    mine = settings / f"run-{'ab' * 32}.xlk"
    mine.write_bytes(b"my data\n")
    store.verify()
    assert store.prune(0) is not None
    store.clear()
    assert mine.read_bytes() == b"my data\n" and (settings / "partition.json").read_text() == '{"theme": "dark"}'


def test_the_total_is_the_same_whoever_counts_a_folder_as_a_partition(store):
    """Counted alike either way, so the cap, ``total_bytes()`` and the prune message's parts always agree."""
    (store.root / "logs" / ".x.1.abc.tmp").write_bytes(b"x" * 9000)  # a temp's name: never counted, anywhere
    (store.root / "logs" / "sub").mkdir()
    (store.root / "logs" / "sub" / "deep.txt").write_text("deep")
    everything = scan(store.root, is_partition=lambda name: True).total
    assert scan(store.root).total == everything == scan(store.root, is_partition=lambda name: False).total
    assert sum(size for _, _, size in counted_files(store.root)) == everything == store.total_bytes()
    assert sum(size for _, _, size in store.counted_files()) == everything


# -- enable_cache(max_bytes=...): the cache's own eviction, in a JAX process ----------------------------------------

def test_enable_cache_max_bytes_evicts_entries_and_no_file_of_the_users(tmp_path, worker):
    from conftest import kinds

    cache = tmp_path / "cache"
    cache.mkdir()
    _user_folder(cache / "logs")
    for path in (cache / "logs").iterdir():
        os.utime(path, (1_000_000, 1_000_000))  # older than any entry: what LRU eviction took first
    report = worker(cache, *(f"sin{n}" for n in range(1, 13)), max_bytes=80_000)
    assert kinds(report).count("evict") >= 2, kinds(report)
    assert _files(cache / "logs") == USER
    assert not any("logs" in str(e.get("partition")) for e in report["events"] if e["kind"] == "evict")
    store = LocalStore(cache)
    assert 0 < len(store.entries()) - 3 < 12 and store.total_bytes() <= 80_000  # entries() lists logs' three


def test_a_renamed_copy_of_an_entry_inside_a_partition_is_left_alone(store):
    """A copy of an entry under a plain name (``copy.xlk``) starts with the magic bytes but names another key in
    its header: not the store's file, so prune, verify and clear leave it (a red team's finding)."""
    pdir = store.root / PART
    _put(store, "k1")
    copy = pdir / "copy.xlk"
    copy.write_bytes((pdir / "k1.xlk").read_bytes())
    store.verify()
    store.prune(0)
    store.clear()
    assert copy.exists() and not (pdir / "k1.xlk").exists()
