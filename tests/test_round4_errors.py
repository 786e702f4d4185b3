"""Round 4 of bad input and hostile storage: every public setting is checked at the boundary by name, a shared
bucket's junk is never listed as entries, a remote URL xlakit cannot use is refused naming the setting, a
quarantine note that could not be written is said, and a bundle is never written unloadable."""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run, run_json

SECRET = b"test-secret-of-32-bytes-length!!"
PART = "cpu-jaxlib0.10.2-x86_64-avx512-3f2a9c1e"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", SECRET.decode())
    monkeypatch.delenv("XLAKIT_CACHE_REMOTE", raising=False)
    monkeypatch.delenv("XLAKIT_CACHE_REMOTE_OPTIONS", raising=False)


# -- 1. `cache ls --remote` lists only what authenticates ----------------------------------------------------

@pytest.fixture
def junk_bucket(tmp_path):
    """A file:// bucket with two real entries, one of another key, 300 random files named like entries and 5 forged
    envelopes (xlakit's magic and this key's public id, no valid MAC)."""
    from xlakit.store import seal
    from xlakit.store.envelope import MAGIC, key_id
    from xlakit.store.remote import RemoteStore

    url = f"file://{tmp_path / 'bucket'}"
    remote = RemoteStore(url)
    for key, name in (("jit_real-" + "a" * 64, "jit_real"), ("jit_other-" + "b" * 64, "jit_other")):
        assert remote.put(PART, key, seal({"name": name, "key": key, "partition": PART}, b"p" * 300, SECRET))
    theirs = "jit_theirs-" + "c" * 64
    assert remote.put(PART, theirs, seal({"name": "x", "key": theirs, "partition": PART}, b"y", b"another secret!!"))
    folder = Path(remote.object_name(PART, theirs)).parent
    for i in range(300):
        (folder / f"jit_step-{i:064x}").write_bytes(os.urandom(100))
    for i in range(5):
        (folder / f"jit_forged-{i:064x}").write_bytes(MAGIC + key_id(SECRET) + (16).to_bytes(4, "big") + bytes(200))
    return url


def test_remote_ls_lists_what_authenticates_and_counts_the_rest(junk_bucket, capsys):
    """Fault: one table row per junk object (3,000 random files named like entries gave 3,004 lines), all listed
    as entries. Only the two objects whose header authenticates are rows; the rest are counted by kind with three
    examples each; --json lists every object, with why it is not listed."""
    code, out, err = run(capsys, "cache", "ls", "--remote", junk_bucket)
    lines = out.splitlines()
    assert code == 0 and len(lines) <= 20, len(lines)
    rows = [line for line in lines if line.startswith("jit_")]
    assert sorted(line.split()[0] for line in rows) == ["jit_other", "jit_real"]
    assert ("not listed 306 objects whose header does not authenticate with this key as the entry at their name: "
            "300 not-xlakit, 5 unauthenticated, 1 foreign; --json lists them all") in lines
    assert "... and 297 more not-xlakit" in out
    assert lines[-1].startswith("308 objects, ") and lines[-1].endswith(
        "; 306 of them not listed (another key's, or not provably entries)")
    code, data = run_json(capsys, "cache", "ls", "--remote", junk_bucket)
    assert code == 0 and data["count"] == 308 and data["listed"] == 2
    kinds: dict[str, int] = {}
    for o in data["objects"]:
        kind = "listed" if o["reason"] is None else o["reason"].partition(":")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds == {"listed": 2, "not-xlakit": 300, "unauthenticated": 5, "foreign": 1}


def test_remote_ls_of_a_bucket_holding_only_junk_says_so_in_a_few_lines(junk_bucket, capsys):
    from xlakit.store.remote import RemoteStore

    remote = RemoteStore(junk_bucket)
    for o in list(remote.list()):
        if o.key.startswith(("jit_real", "jit_other")):
            remote.delete(o.partition, o.key)
    code, out, _ = run(capsys, "cache", "ls", "--remote", junk_bucket)
    assert code == 0 and "jit_step " not in out and len(out.splitlines()) <= 12
    assert out.splitlines()[-1].startswith("306 objects") and "306 of them not listed" in out


# -- 2. every public setting checked at the boundary, by name ------------------------------------------------

def _record(maxlen):
    from xlakit import events

    with events.record(maxlen=maxlen, jax_signals=False):
        pass


def _warn(**kwargs):
    from xlakit import events

    events.warn_recompiles(**kwargs)


def _budget(**kwargs):
    from xlakit.memory import weight_budget

    return weight_budget(**{"arena_bytes": 2**30, "scratch_bytes": 2**20, **kwargs})


def _events_call(method, *args, **kwargs):
    from xlakit.events import EventLog

    return getattr(EventLog(), method)(*args, **kwargs)


@pytest.mark.parametrize("call, error, match", [
    (lambda: __import__("xlakit.events").events.EventLog(maxlen=2**64), ValueError,
     r"^maxlen must be an int number of events from 1 to 9223372036854775807"),
    (lambda: __import__("xlakit.events").events.EventLog(maxlen="1000"), TypeError, r"^maxlen must be an int.*got str"),
    (lambda: __import__("xlakit.events").events.EventLog(maxlen=0), ValueError, r"^maxlen must be an int"),
    (lambda: _record(2**64), ValueError, r"^maxlen must be"),
    (lambda: _record(1.5), TypeError, r"^maxlen must be"),
    (lambda: _warn(after=5, window_s=10**400), ValueError, r"^window_s must be a finite number of seconds > 0"),
    (lambda: _warn(window_s="60"), TypeError, r"^window_s must be a number of seconds"),
    (lambda: _warn(after=math.nan), TypeError, r"^after must be an int number of recompiles"),
    (lambda: _warn(after=math.inf), TypeError, r"^after must be an int"),
    (lambda: _warn(after=1.5), TypeError, r"^after must be an int"),
    (lambda: _warn(after=2**64), ValueError, r"^after must be an int number of recompiles .* from 1 to 1000000000"),
    (lambda: _warn(after=0), ValueError, r"^after must be at least 1 recompile"),
    (lambda: _budget(fraction="0.9"), TypeError, r"^fraction must be a number in \(0, 1\], got str '0.9'"),
    (lambda: _budget(fraction=math.nan), ValueError, r"^fraction must be a number in \(0, 1\], got nan"),
    (lambda: _budget(wiggle=None), TypeError, r"^wiggle must be a number in \[0, 1\), got NoneType"),
    (lambda: _budget(wiggle=10**400), ValueError, r"^wiggle must be a number in \[0, 1\)"),
    (lambda: _budget(scratch_bytes=None), TypeError, r"^scratch_bytes must be an int number of bytes or an iterable"),
    (lambda: _budget(scratch_bytes="10"), TypeError, r"^scratch_bytes must be"),
    (lambda: _budget().fits("10"), TypeError, r"^nbytes must be an int"),
    (lambda: __import__("xlakit").events.cache_stats(source=[1]), TypeError, r"^source must be one of 'xlakit'"),
    (lambda: __import__("xlakit").events.cache_stats(source="xla"), ValueError,
     r"^unknown event source 'xla'; expected one of xlakit, jax-persistent, jit, jax"),
    (lambda: _events_call("events", kind="hitt"), ValueError, r"^kind must be one of 'hit'"),
    (lambda: _events_call("events", since="5"), TypeError, r"^since must be a number of seconds"),
    (lambda: _events_call("events", since=math.nan), ValueError, r"^since must be a number of seconds"),
    (lambda: _events_call("since", "5"), TypeError, r"^t must be a number of seconds"),
    (lambda: _events_call("last", "f", since="x"), TypeError, r"^since must be"),
])
def test_a_bad_public_setting_is_refused_by_name(call, error, match):
    """Fault: bare OverflowError / "'<' not supported" / "unhashable" from deep inside, or (after=nan) accepted and
    then never warning. Each is a TypeError or ValueError whose message starts with the setting's name and says
    what it accepts."""
    with pytest.raises(error, match=match):
        call()


def test_events_load_checks_maxlen_before_reading(tmp_path):
    from xlakit import events

    with pytest.raises(ValueError, match="^maxlen must be an int number of events"):
        events.load(tmp_path / "missing.jsonl", maxlen=2**64)  # not an OSError: the file is never opened
    with pytest.raises(TypeError, match="^maxlen must be"):
        events.load(tmp_path / "missing.jsonl", maxlen="10")
    log = events.EventLog()
    log.emit("hit", name="f", source="xlakit")
    log.save(tmp_path / "e.jsonl")
    assert events.load(tmp_path / "e.jsonl", maxlen=7).maxlen == 7
    assert events.load(tmp_path / "e.jsonl").maxlen == 100_000


def test_good_settings_still_pass_and_set_what_they_say():
    from xlakit import events
    from xlakit._jax.retrace import TRACKER

    try:
        events.warn_recompiles(after=3, window_s=10)
        assert (TRACKER.warn_after, TRACKER.window_s) == (3, 10.0)
        events.warn_recompiles(after=None, window_s=np.float64(2.5))
        assert (TRACKER.warn_after, TRACKER.window_s) == (None, 2.5)
    finally:
        events.warn_recompiles()
    assert (TRACKER.warn_after, TRACKER.window_s) == (5, 60.0)
    b = _budget(fraction=np.float32(0.5), wiggle=0)
    assert (b.fraction, b.wiggle, b.pool_bytes) == (0.5, 0.0, 2**29) and b.fits(2**29) and not b.fits(2**29 + 1)
    assert events.EventLog(maxlen=2**63 - 1).maxlen == 2**63 - 1
    assert events.cache_stats(source="xlakit").source == "xlakit"


def test_remote_options_of_the_wrong_type_are_named(tmp_path):
    import xlakit
    from xlakit.store.remote import RemoteStore, remote_settings

    with pytest.raises(TypeError, match=r"^remote_options must be a dict of fsspec storage options.*got int 0"):
        xlakit.ExecutableCache(tmp_path / "c", remote="memory://b", remote_options=0)
    with pytest.raises(TypeError, match=r"^remote_options: every option name must be a string"):
        remote_settings("memory://b", None, {1: "x"})
    with pytest.raises(TypeError, match=r"^storage option 'config_kwargs' must be a dict"):
        RemoteStore("s3://bucket/prefix", storage_options={"config_kwargs": 5})
    with pytest.raises(TypeError, match=r"^remote_mode must be 'rw' or 'ro'"):
        remote_settings("memory://b", 1, None)
    assert remote_settings("memory://b", "ro", {"a": 1}) == ("memory://b", "ro", {"a": 1})


def test_probe_timeout_is_checked_first_whether_or_not_isolated():
    from xlakit.memory import probe

    for bad, error in ((" 5 ", TypeError), ("5", TypeError), (True, TypeError), (math.nan, ValueError),
                       (0, ValueError), (10**400, ValueError)):
        with pytest.raises(error, match="^timeout_s must be"):
            probe(lambda x: x * 2, np.ones(3, np.float32), timeout_s=bad)


def test_tiered_store_settings_are_checked_by_name():
    from xlakit.store.base import MemoryStore
    from xlakit.store.tiered import TieredStore

    for kwargs, error, match in (({"max_failures": "3"}, TypeError, "^max_failures must be an int"),
                                 ({"max_pending": 2**64}, ValueError, "^max_pending must be an int"),
                                 ({"drain_timeout_s": math.nan}, ValueError, "^drain_timeout_s must be a finite"),
                                 ({"timeout_s": 0}, ValueError, "^timeout_s must be a finite number of seconds > 0"),
                                 ({"min_upload_compile_s": "1"}, TypeError, "^min_upload_compile_s must be")):
        with pytest.raises(error, match=match):
            TieredStore(MemoryStore(), MemoryStore(), **kwargs)
    tier = TieredStore(MemoryStore(), MemoryStore(), drain_timeout_s=0)
    try:
        with pytest.raises(ValueError, match="^timeout_s must be a finite"):
            tier.drain(math.inf)
        assert tier.drain(0) == 0
    finally:
        tier.close()


# -- 3. a remote URL xlakit cannot use: refused naming the setting and the schemes ----------------------------

@pytest.mark.parametrize("url", ["ftp://x/y", "zip://x", "http://host/p", "s4://bucket"])
def test_cli_refuses_an_unsupported_remote_naming_the_option(url, capsys, tmp_path, monkeypatch):
    """Fault: `--remote ftp://x/y` said "TypeError: FTPFileSystem.__init__() missing ... 'host'" and `zip://x`
    blamed the working folder and --path."""
    monkeypatch.chdir(tmp_path)
    for cmd in (["ls"], ["stats"], ["verify"], ["prune", "--older-than", "1d"]):
        code, out, err = run(capsys, "cache", *cmd, "--remote", url)
        assert code == 2 and out == ""
        assert err.startswith(f"xlakit: error: --remote={url!r}: xlakit cannot keep a cache at ")
        assert "s3://bucket/prefix, gs://bucket/prefix, file:///shared/folder or memory://name" in err
        assert "--path" not in err and "Traceback" not in err


def test_api_refuses_an_unsupported_remote_naming_its_source(tmp_path, monkeypatch):
    import xlakit
    from xlakit.store.remote import RemoteStore, remote_settings

    with pytest.raises(ValueError, match=r"^remote='ftp://x/y': xlakit cannot keep a cache at ftp:// URLs; use s3://"):
        xlakit.ExecutableCache(tmp_path / "c", remote="ftp://x/y")
    with pytest.raises(TypeError, match=r"^remote must be a URL string"):
        remote_settings(5)
    with pytest.raises(ValueError, match=r"^remote='s3://' names no bucket or folder"):
        remote_settings("s3://")
    with pytest.raises(ValueError, match=r"^remote='bucket/prefix' is not a URL"):
        RemoteStore("bucket/prefix")
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE", "zip://x")
    with pytest.raises(ValueError, match=r"^XLAKIT_CACHE_REMOTE='zip://x': xlakit cannot keep a cache at zip://"):
        remote_settings()
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE", "")
    assert remote_settings() is None
    assert remote_settings("MEMORY://bucket")[0] == "MEMORY://bucket"  # schemes are case-insensitive


# -- 4. a quarantine note that could not be written is said, never left empty ---------------------------------

@pytest.fixture
def store(tmp_path):
    from xlakit.store import LocalStore

    return LocalStore(tmp_path / "cache", secret=SECRET)


def _damage(store, key):
    assert store.put(PART, key, {"name": "f", "environment": {"platform": "cpu"}}, b"payload" * 100).stored
    path = store.root / PART / f"{key}.xlk"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    return path


def _full_for_notes(monkeypatch):
    """The quarantine cannot take a note (ENOSPC writing it); the entry itself still moves by link or rename."""
    real_write = os.write

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".reason.txt"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)


def _notes(store) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (store.root / "quarantine").rglob("*.reason.txt")}


def test_verify_says_a_moved_entry_has_no_reason_note(store, monkeypatch, capsys):
    """Fault: a full quarantine left the moved entry's .reason.txt empty (0 bytes) and nothing said so."""
    path = _damage(store, "k")
    _full_for_notes(monkeypatch)
    [(info, reason)] = store.verify()
    assert not path.exists() and len(list((store.root / "quarantine" / PART).glob("k.*.xlk"))) == 1
    assert _notes(store) == {}  # no empty note
    assert reason.startswith("corrupt: payload SHA-256 mismatch") and reason.endswith(
        " [quarantined without its reason note: No space left on device]")
    path = _damage(store, "k2")
    code, out, _ = run(capsys, "cache", "verify", "--path", str(store.root))
    assert code == 1 and out.splitlines()[-1] == (
        f"1 of 1 entries failed verification and will not be loaded; 1 moved to {store.root / 'quarantine'} (1 without "
        "the reason note beside it, which could not be written: No space left on device)")
    assert not path.exists() and _notes(store) == {}


def test_a_reader_says_a_moved_entry_has_no_reason_note(store, monkeypatch):
    _damage(store, "k")
    _full_for_notes(monkeypatch)
    got = store.get(PART, "k")
    assert got.status == "corrupt" and got.quarantined_to is not None and got.quarantined_to.exists()
    assert got.disposition == (f"moved to {got.quarantined_to} without its reason note, which could not be written "
                               "(No space left on device)")
    path = _damage(store, "k2")
    with pytest.warns(RuntimeWarning, match="without its reason note, which could not be written"):
        moved = store.quarantine(path, "corrupt: by hand")
    assert moved is not None and moved.exists() and not path.exists() and _notes(store) == {}


def test_the_note_is_written_first_and_removed_when_the_entry_cannot_follow(store, monkeypatch):
    """A quarantine on another filesystem that takes the note but not the copy: the entry stays in place and no
    orphan note is left; one that takes both gets the note with the reason."""
    path = _damage(store, "k")

    def exdev(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    for name in ("link", "rename", "replace"):
        monkeypatch.setattr(os, name, exdev)
    real_fsync = os.fsync

    def full(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".xlk"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    [(_, reason)] = store.verify()
    assert path.exists() and "[not quarantined: the quarantine" in reason and "No space left on device" in reason
    assert _notes(store) == {} and list((store.root / "quarantine").rglob("*.xlk")) == []
    monkeypatch.setattr(os, "fsync", real_fsync)
    [(_, reason)] = store.verify()
    [note] = (store.root / "quarantine" / PART).glob("k.*.reason.txt")
    assert not path.exists() and "[" not in reason and note.read_text().startswith(reason)


# -- 5, 6. a bundle is never written unloadable -------------------------------------------------------------

def test_a_parameter_named_like_the_format_s_header_key_round_trips(tmp_path):
    """Fault: a parameter "__metadata__" (safetensors' reserved header key) was exported without a word, and the
    load failed: "tensor named in manifest.json is not in the file". It is stored under another name, mapped back."""
    import jax
    import jax.numpy as jnp

    import xlakit
    from xlakit.bundle.weights import read_weight_specs, read_weights

    params = {"__metadata__": jnp.arange(3.0), "w": jnp.ones(3),
              "xlakit.renamed": {"__metadata__": jnp.full(3, 7.0)}}  # the escape's own name, taken by a user

    def fn(p, x):
        return x * p["__metadata__"] + p["w"] + p["xlakit.renamed"]["__metadata__"]

    x = jnp.ones((2, 3))
    xlakit.export_bundle(fn, params, x, tmp_path / "b", batch_sizes=(2,))
    got = xlakit.load_bundle(tmp_path / "b", progress=False).wait()(x)
    assert np.asarray(got).tolist() == np.asarray(jax.jit(fn)(params, x)).tolist() == [[8.0, 9.0, 10.0]] * 2
    wfile = tmp_path / "b" / "weights.safetensors"
    assert sorted(read_weights(wfile)) == ["__metadata__", "w", "xlakit.renamed.__metadata__"]
    assert read_weights(wfile)["__metadata__"].tolist() == [0.0, 1.0, 2.0]
    assert read_weight_specs(wfile)["xlakit.renamed.__metadata__"].shape == (3,)
    raw = wfile.read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert json.loads(header["__metadata__"]["xlakit.renamed"]) == {"xlakit.renamed.__metadata___": "__metadata__"}


def test_a_forged_rename_map_is_refused(tmp_path):
    from safetensors.numpy import save

    from xlakit.bundle import WeightsError
    from xlakit.bundle.weights import read_weights

    path = tmp_path / "w.safetensors"
    path.write_bytes(save({"a": np.ones(2, np.float32), "b": np.zeros(2, np.float32)},
                          metadata={"xlakit.renamed": json.dumps({"a": "b"})}))
    with pytest.raises(WeightsError, match="renames no stored tensor to a name the format reserves"):
        read_weights(path)


def test_a_parameter_name_that_is_not_utf8_is_refused_naming_its_path(tmp_path):
    import jax.numpy as jnp

    import xlakit

    with pytest.raises(ValueError, match=r"parameter \['l\\ud800'\] has a name that is not UTF-8 text"):
        xlakit.export_bundle(lambda p, x: x * p["l\ud800"], {"l\ud800": jnp.ones(3)}, jnp.ones((2, 3)), tmp_path / "b")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("dtype, wide", [("int2", "int8"), ("uint2", "uint8")])
def test_an_output_or_input_jax_export_cannot_serialize_is_named(tmp_path, dtype, wide):
    """Fault: an int2 output made export_bundle fail with a bare ``KeyError: dtype(int2)`` from jax.export."""
    import jax.numpy as jnp

    import xlakit

    params = {"w": jnp.ones(3)}
    refused = (rf"^variant 'default': output 'y' has dtype {dtype}, which jax.export .* cannot serialize; return it "
               rf"in a wider dtype \(e.g. out.astype\(jnp.{wide}\)")
    with pytest.raises(ValueError, match=refused):
        xlakit.export_bundle(lambda p, x: {"y": (x * p["w"]).astype(dtype)}, params, jnp.ones((2, 3)),
                             tmp_path / "out")
    with pytest.raises(ValueError, match=rf"^variant 'default': input 'x' has dtype {dtype}, .* pass it in a wider"):
        xlakit.export_bundle(lambda p, x: x.astype(jnp.float32) * p["w"], params, jnp.ones((2, 3), dtype),
                             tmp_path / "in")
    assert not (tmp_path / "out").exists() and not (tmp_path / "in").exists()


def test_export_settings_are_checked_before_tracing(tmp_path):
    """Fault: platforms="cpu" became the platforms 'c', 'p', 'u' in the manifest; name=5 and overwrite="no" were
    accepted; batch_sizes=[2**70] failed deep in tracing with a message about the batch axis."""
    import jax.numpy as jnp

    import xlakit

    args = (lambda p, x: x * p["w"], {"w": jnp.ones(3)}, jnp.ones((2, 3)))
    for kwargs, error, match in (({"platforms": "cpu"}, TypeError, "^platforms must be a non-empty list"),
                                 ({"platforms": [1]}, TypeError, "^platforms must be"),
                                 ({"name": 5}, TypeError, "^name must be a non-empty string or None"),
                                 ({"name": " "}, ValueError, "^name must be"),
                                 ({"overwrite": "no"}, TypeError, "^overwrite must be True or False"),
                                 ({"batch_sizes": "8"}, TypeError, "^batch_sizes must be a sequence"),
                                 ({"batch_sizes": [2**70]}, ValueError, "^batch_sizes must be an int batch size")):
        with pytest.raises(error, match=match):
            xlakit.export_bundle(*args, tmp_path / "b", **kwargs)
    with pytest.raises(TypeError, match="^path must be the bundle folder"):
        xlakit.export_bundle(*args, 5)
    assert not (tmp_path / "b").exists()


def test_yes_no_options_take_only_true_or_false():
    """probe(warmup="false") ran the warm-up ("false" is truthy), warmup=<array> and sweep(probe=<array>) raised
    numpy's "truth value ... is ambiguous" naming no setting, sweep(probe="no") probed: each now a TypeError
    naming the option."""
    import jax
    import jax.numpy as jnp

    from xlakit import memory

    f = jax.jit(lambda x: x * 2)
    x = jnp.ones(4)
    for bad in ("false", jnp.ones(3), float("nan"), None):
        with pytest.raises(TypeError, match="warmup must be True or False"):
            memory.probe(f, x, warmup=bad)
    for bad in ("no", jnp.ones(2)):
        with pytest.raises(TypeError, match="probe must be True or False"):
            memory.sweep(f, lambda n: (jnp.ones(n),), [2], probe=bad)
    assert memory.sweep(f, lambda n: (jnp.ones(n),), [2], probe=False).frame["batch"].tolist() == [2]
