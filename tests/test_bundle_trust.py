"""A bundle folder is not trusted: planted files, symlinks, deep JSON and killed exports never hang, crash,
exhaust memory or touch a file that is not the bundle's.

One tiny affine bundle (batch sizes 1 and 2) is exported once per module; each test copies it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import fresh_process
import numpy as np
import pytest
from conftest import worker_env

from xlakit import events
from xlakit.bundle import ManifestError, ModuleError, check_bundle, export_bundle, load_bundle
from xlakit.bundle.files import read_regular, stale_temps
from xlakit.bundle.hashes import RECORD, read_record
from xlakit.cli import main as cli_main
from xlakit.store import safejson

P = {"w": np.arange(6, dtype=np.float32).reshape(3, 2), "b": np.ones(2, np.float32)}
X = np.arange(6, dtype=np.float32).reshape(2, 3)


def affine(p, x):
    return x @ p["w"] + p["b"]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = tmp_path_factory.mktemp("pristine") / "aff"
    export_bundle(affine, P, X, path, batch_sizes=(1, 2))
    return path


@pytest.fixture
def bundle(pristine, tmp_path):
    dest = tmp_path / "aff"
    shutil.copytree(pristine, dest)
    return dest


def load(path, **kw):
    return load_bundle(path, progress=False, **kw).wait()  # every program loaded (or failed), events emitted


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


# -- planted module files ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("plant", ["fifo", "dev_zero", "directory", "sparse_huge"])
def test_planted_module_fails_alone_at_once(bundle, plant):
    """A module that is a FIFO (an open blocks forever), a symlink to /dev/zero (read until memory runs
    out), a folder or a 2 GiB sparse file fails alone, named, without being read; the other module loads."""
    target = bundle / "model.b2.jaxexp"
    target.unlink()
    if plant == "fifo":
        os.mkfifo(target)
    elif plant == "dev_zero":
        os.symlink("/dev/zero", target)
    elif plant == "directory":
        target.mkdir()
    else:
        with open(target, "wb") as f:
            f.truncate(2 << 30)
    start = time.monotonic()
    check = check_bundle(bundle)
    assert [p for p in check.problems if "model.b2.jaxexp" in p], check.problems
    assert {m.file: m.state for m in check.modules} == {"model.b1.jaxexp": "new", "model.b2.jaxexp": "missing",
                                                         "model.bpoly.jaxexp": "new"}
    with pytest.warns(RuntimeWarning, match="1 of 2 modules failed"):
        loaded = load(bundle)
    assert time.monotonic() - start < 30
    err = loaded.errors["model.b2.jaxexp"]
    assert isinstance(err, ModuleError) and err.file == str(target)
    assert ("not a regular file" in str(err)) or ("over the" in str(err))
    np.testing.assert_array_equal(np.asarray(loaded(X[:1])), affine(P, X[:1]))


def test_read_regular_bounds():
    assert read_regular(__file__, 1 << 20).startswith(b'"""')
    with pytest.raises(OSError, match="over the 10-byte bound"):
        read_regular(__file__, 10)
    with pytest.raises(OSError, match="character device"):
        read_regular("/dev/zero", 1 << 20)


# -- JSON depth and numbers ---------------------------------------------------------------------------------------

def test_deeply_nested_record_is_rewritten_and_reported(bundle, capsys):
    load(bundle)
    (bundle / ".cache" / RECORD).write_text('{"modules":' + "[" * 100_000 + "]" * 100_000 + "}")
    state = read_record(bundle / ".cache")
    assert state.status == "unreadable" and "nested deeper than 100 levels" in state.reason
    assert any("unreadable" in p for p in check_bundle(bundle).problems)
    with pytest.warns(RuntimeWarning, match="unreadable"):
        loaded = load(bundle)
    assert loaded.counts() == {"hit": 2, "miss": 0, "error": 0} and "nested" in loaded.record_problem
    assert read_record(bundle / ".cache").status == "ok"  # rewritten from the current modules
    (bundle / ".cache" / RECORD).write_text('{"format_version": 1e999, "modules": {}}')
    assert "out of range" in read_record(bundle / ".cache").reason
    (bundle / ".cache" / RECORD).write_text('{"format_version": NaN, "modules": {}}')
    assert "not a finite number" in read_record(bundle / ".cache").reason


def test_deeply_nested_manifest_names_the_file(bundle, capsys):
    (bundle / "manifest.json").write_text('{"format": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(ManifestError) as e:
        load(bundle)
    assert e.value.file == str(bundle / "manifest.json") and "nested deeper than 100 levels" in str(e.value)
    assert "nested" in check_bundle(bundle).problems[0]
    assert cli_main(["bundle", "check", str(bundle)]) == 1
    assert "manifest.json" in capsys.readouterr().out
    with pytest.raises(ValueError, match="integer"):
        safejson.loads(b"[" + b"9" * 400 + b"]")


@pytest.mark.parametrize("text", ['"' + '\\"' * (1 << 19), '{"name": "' + '\\"' * (1 << 19) + '"'])
def test_adversarial_string_manifest_is_answered_at_once(bundle, text):
    """A 1 MiB manifest of one string of escaped quotes made the old bracket-counting regex retry from every
    quote (quadratic: `bundle check` hung, for hours). The bound is this thread's CPU seconds, which a loaded
    machine does not stretch; SIGALRM (wall clock, roomy) turns a regression into a failure instead of a hang."""
    (bundle / "manifest.json").write_text(text)

    def too_slow(signum, frame):
        raise TimeoutError("manifest parsing took over 60 s")

    old = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(60)
    try:
        start = time.thread_time()
        problems = check_bundle(bundle).problems
        with pytest.raises(ManifestError) as e:
            load(bundle)
        took = time.thread_time() - start
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert "manifest.json" in problems[0] and e.value.file == str(bundle / "manifest.json")
    assert "not valid JSON" in str(e.value) and took < 2.0


# -- .cache symlinks ----------------------------------------------------------------------------------------------

def test_symlinked_cache_is_never_followed(bundle, tmp_path):
    """A bundle whose .cache is a symlink to the user's own cache: warm and check neither delete nor write
    anything there (the load compiles and stores nothing, and says why)."""
    users = tmp_path / "users-cache"
    (users / "cpu-part").mkdir(parents=True)
    (users / "cpu-part" / "model.b1-" ).with_suffix(".xlk").write_bytes(b"the user's entry")
    (users / RECORD).write_text('{"format_version": 1, "modules": {"model.b1.jaxexp": "' + "0" * 64 + '"}}')
    (users / "notes.txt").write_text("mine")
    before = snapshot(users)
    os.symlink(users, bundle / ".cache")
    check = check_bundle(bundle)
    assert check.cache_problem and "symlink" in check.cache_problem and check.drops == ()
    with events.record() as log, pytest.warns(RuntimeWarning, match="never followed"):
        loaded = load(bundle)
    assert loaded.counts() == {"hit": 0, "miss": 2, "error": 0} and "symlink" in loaded.cache_problem
    assert [e.kind for e in log if e.kind in ("store", "evict")] == []
    assert snapshot(users) == before
    np.testing.assert_array_equal(np.asarray(loaded(X)), affine(P, X))


def test_symlinked_partition_and_record_are_not_followed(bundle, tmp_path):
    from xlakit._jax.environment import current_environment

    load(bundle)
    part = current_environment().partition_name()
    outside = tmp_path / "outside"
    shutil.move(str(bundle / ".cache" / part), outside)
    os.symlink(outside, bundle / ".cache" / part)
    before = snapshot(outside)
    with pytest.warns(RuntimeWarning, match="never followed"):
        loaded = load(bundle)
    assert loaded.counts()["miss"] == 2 and snapshot(outside) == before
    os.unlink(bundle / ".cache" / part)

    load(bundle)                                           # a real partition again, with two entries
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, bundle / ".cache" / "quarantine")
    entry = next((bundle / ".cache" / part).glob("*.xlk"))
    entry.write_bytes(entry.read_bytes()[:-10] + b"corrupted!")  # would be quarantined... into `elsewhere`
    with pytest.warns(RuntimeWarning, match="never followed"):
        load(bundle)
    assert list(elsewhere.iterdir()) == [] and entry.exists()
    os.unlink(bundle / ".cache" / "quarantine")

    secret_file = tmp_path / "users-file.json"
    secret_file.write_text("precious")
    (bundle / ".cache" / RECORD).unlink()
    os.symlink(secret_file, bundle / ".cache" / RECORD)
    with pytest.warns(RuntimeWarning, match="symlink"):
        load(bundle)
    assert secret_file.read_text() == "precious"          # the link was replaced, its target never written
    assert not (bundle / ".cache" / RECORD).is_symlink()


def test_missing_record_drops_only_the_bundles_own_keys(bundle):
    """Without module_hashes.json the loader drops stale programs of the manifest's modules, but never an
    entry of another form in the same real .cache folder (transparent-mode jit entries were deleted)."""
    from xlakit._jax.environment import current_environment
    from xlakit.store import LocalStore

    load(bundle)
    part = current_environment().partition_name()
    store = LocalStore(bundle / ".cache")
    keys = {"stale": "model.b1-" + "ab" * 32 + "-b3", "jit": "jit__lambda-0123abcd",
            "suffix": "model.b1-" + "ab" * 32 + "-extra", "other": "othermodel.b1-" + "ab" * 32}
    for key in keys.values():
        assert store.put(part, key, {}, b"payload").stored
    pdir = store.partition_dir(part)
    stale = pdir / (keys.pop("stale") + ".xlk")
    foreign = [pdir / (k + ".xlk") for k in keys.values()]
    assert stale.exists() and all(p.exists() for p in foreign)
    (bundle / ".cache" / RECORD).unlink()
    loaded = load(bundle)
    assert loaded.counts() == {"hit": 2, "miss": 0, "error": 0}
    assert [p.name for p in foreign if p.exists()] == [p.name for p in foreign]
    assert not stale.exists(), "a program of an old hash of a named module is still dropped"


# -- exports ---------------------------------------------------------------------------------------------------

def test_overwrite_never_replaces_a_users_files(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "encoder_v3.jaxexp").write_bytes(b"the user's own jax.export artifact")
    (proj / "notes.txt").write_text("notes")
    with pytest.raises(FileExistsError, match="not a bundle"):
        export_bundle(affine, P, X, proj)
    export_bundle(affine, P, X, proj, overwrite=True)     # written beside the user's files, nothing deleted
    assert (proj / "encoder_v3.jaxexp").read_bytes() == b"the user's own jax.export artifact"
    export_bundle(affine, P, X, proj, batch_sizes=(2,), overwrite=True)
    assert sorted(p.name for p in proj.glob("*.jaxexp")) == ["encoder_v3.jaxexp", "model.b2.jaxexp",
                                                            "model.bpoly.jaxexp"]

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "model.b1.jaxexp").write_bytes(b"a user's file that happens to have a bundle's name")
    with pytest.raises(FileExistsError, match=r"model.b1.jaxexp.*not this bundle's files"):
        export_bundle(affine, P, X, mine, overwrite=True)
    assert (mine / "model.b1.jaxexp").read_bytes().startswith(b"a user's file")
    (proj / "model.b8.jaxexp").write_bytes(b"planted in a bundle, not named by its manifest")
    with pytest.raises(FileExistsError, match="not this bundle's files"):
        export_bundle(affine, P, X, proj, batch_sizes=(2, 8), overwrite=True)


def test_foreign_manifest_cannot_get_a_users_file_deleted(pristine, tmp_path):
    """A manifest that names a user's file (weights.file "thesis.tex", a module "notes.md") does not make
    that file the bundle's: overwrite=True leaves it alone instead of deleting it as no longer exported."""
    folder = tmp_path / "paper"
    folder.mkdir()
    (folder / "thesis.tex").write_text("my thesis")
    manifest = json.loads((pristine / "manifest.json").read_text())
    manifest["weights"]["file"] = "thesis.tex"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    export_bundle(affine, P, X, folder, batch_sizes=(1, 2), overwrite=True)
    assert (folder / "thesis.tex").read_text() == "my thesis"
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "model.b1.jaxexp", "model.b2.jaxexp",
                                                        "model.bpoly.jaxexp", "thesis.tex", "weights.safetensors"]
    np.testing.assert_array_equal(np.asarray(load(folder)(X)), affine(P, X))


KILLED_EXPORT = """
import os, sys, time, numpy as np, xlakit
real = os.replace
def stall(src, dst):
    if str(dst).endswith("weights.safetensors"):
        print("TEMP WRITTEN", flush=True); time.sleep(600)
    return real(src, dst)
os.replace = stall
xlakit.export_bundle(lambda p, x: x @ p["w"], {"w": np.full((64, 64), float(sys.argv[2]), np.float32)},
                     np.ones((1, 64), np.float32),
                     sys.argv[1], overwrite=True, rows_independent=True)
"""


def test_killed_export_temp_is_removed_by_the_next_export_and_check(tmp_path):
    path = tmp_path / "b"
    for scale, cleaner in ((1, "export"), (3, "check")):  # other weights each time: a write happens
        p = fresh_process.Popen([sys.executable, "-c", KILLED_EXPORT, str(path), str(scale)],
                                stdout=subprocess.PIPE, text=True,
                                env=worker_env())
        assert "TEMP WRITTEN" in p.stdout.readline()
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        temps = stale_temps(path)
        assert [t.name.startswith(".weights.safetensors.") for t in temps] == [True]
        if cleaner == "export":
            export_bundle(lambda p, x: x @ p["w"], {"w": np.ones((64, 64), np.float32)},
                          np.ones((1, 64), np.float32), path, overwrite=True, rows_independent=True)
            assert check_bundle(path).ok
        else:
            assert [Path(t).name for t in check_bundle(path).removed_temps] == [temps[0].name]
        assert list(path.glob(".*.tmp")) == []


@pytest.mark.parametrize("workers, error", [("3", TypeError), (2.5, TypeError), (True, TypeError), (0, ValueError)])
def test_max_workers_of_another_type_is_refused_by_name(tmp_path, workers, error):
    """Fault: "3" raised "'<' not supported between instances of 'str' and 'int'"; 2.5 and True were taken as thread
    counts. Checked before the folder is read."""
    with pytest.raises(error, match="max_workers must be"):
        load_bundle(tmp_path / "no-bundle", max_workers=workers, progress=False)
