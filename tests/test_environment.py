"""The environment partition, with real values from this machine's JAX.

XLA flags are fixed per process, so environments under other ``XLA_FLAGS`` are computed in subprocesses.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import worker_env

from xlakit._jax import environment as envmod
from xlakit._jax import fingerprint as fpmod
from xlakit._jax.environment import Environment, codegen_xla_flags, current_environment
from xlakit._jax.fingerprint import jaxlib_build_fingerprint

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_PRINT_ENV = ("import json; from xlakit._jax.environment import current_environment; "
              "print(json.dumps(current_environment('cpu').to_dict()))")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("XLAKIT_FINGERPRINT_MEMO_DIR", raising=False)  # the memo goes beside this cache
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def envs(tmp_path_factory) -> dict[str, Environment]:
    """Environments computed in fresh processes under different XLA_FLAGS (run in parallel)."""
    base = tmp_path_factory.mktemp("envs")
    flags = {
        "base": None,
        "fast_math_off": "--xla_cpu_enable_fast_math=false",
        "dump": f"--xla_dump_to={base / 'dump'} --xla_dump_hlo_as_text",
        "devices4": "--xla_force_host_platform_device_count=4",
    }
    procs = {}
    for name, value in flags.items():
        env = worker_env({"XLAKIT_CACHE_DIR": str(base / "cache")} | ({"XLA_FLAGS": value} if value else {}))
        procs[name] = subprocess.Popen([sys.executable, "-c", _PRINT_ENV], env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-3000:]
        out[name] = Environment.from_dict(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_real_values_of_this_machine():
    import jax
    import jaxlib.version

    env = current_environment("cpu")
    assert env.platform == "cpu"
    assert env.jax_version == jax.__version__
    assert env.jaxlib_version == jaxlib.version.__version__
    assert env.device_count == len(jax.devices("cpu"))
    assert env.device_kinds == tuple(sorted({d.device_kind for d in jax.devices("cpu")}))
    assert env.process_count == 1
    assert env.compute_capability is None
    assert env.machine == platform.machine()
    assert re.fullmatch(r"[0-9a-f]{16}", env.jaxlib_build)
    assert re.fullmatch(r"[0-9a-f]{64}", env.digest())
    name = env.partition_name()
    assert NAME_RE.match(name) and name.startswith("cpu-jaxlib")
    assert name.endswith(env.digest()[:8])
    if Path("/proc/cpuinfo").exists():
        assert re.fullmatch(r"[0-9a-f]{8}", env.cpu_flags_hash)
    assert current_environment("cpu") is env  # memoized


def test_round_trip_and_differences():
    env = current_environment("cpu")
    again = Environment.from_dict(json.loads(json.dumps(env.to_dict())))
    assert again == env and again.digest() == env.digest()
    level = "avx512" if env.cpu_level != "avx512" else "avx2"  # a level this machine does not have
    other = Environment.from_dict(env.to_dict() | {"device_count": 8, "cpu_level": level})
    assert env.differences(other) == [("device_count", env.device_count, 8), ("cpu_level", env.cpu_level, level)]
    assert env.differences(env) == []
    with pytest.raises(ValueError, match="missing"):
        Environment.from_dict({k: v for k, v in env.to_dict().items() if k != "platform"})
    with pytest.raises(ValueError, match="unknown"):
        Environment.from_dict(env.to_dict() | {"extra": 1})


def test_gpu_partition_name_names_compute_capability():
    env = Environment.from_dict(current_environment("cpu").to_dict()
                                | {"platform": "gpu", "compute_capability": "9.0", "jaxlib_version": "0.9.1+cuda"})
    name = env.partition_name()
    assert name.startswith("gpu-sm90-jaxlib0.9.1_cuda-") and NAME_RE.match(name)


def test_codegen_flag_changes_digest(envs):
    base, fast = envs["base"], envs["fast_math_off"]
    assert [field for field, _, _ in base.differences(fast)] == ["xla_flags"]
    assert fast.xla_flags == ("--xla_cpu_enable_fast_math=false",)
    assert base.digest() != fast.digest() and base.partition_name() != fast.partition_name()


def test_dump_flags_do_not_change_digest(envs):
    assert envs["dump"].differences(envs["base"]) == []
    assert envs["dump"].digest() == envs["base"].digest()


def test_the_process_device_count_is_recorded_but_does_not_partition(envs):
    # How many host devices a process makes changes no program's code; the program's own count is in its key.
    assert envs["devices4"].device_count == 4
    assert [field for field, _, _ in envs["devices4"].differences(envs["base"])] == ["device_count"]
    assert envs["devices4"].xla_flags == ()
    assert envs["devices4"].partition_name() == envs["base"].partition_name()
    procs = Environment.from_dict(envs["base"].to_dict() | {"process_count": 2})
    assert procs.partition_name() == envs["base"].partition_name()


def test_this_process_matches_a_fresh_one(envs):
    if os.environ.get("XLA_FLAGS"):
        pytest.skip("this process runs under XLA_FLAGS")
    assert current_environment("cpu").differences(envs["base"]) == []


def test_codegen_xla_flags():
    flags = ("--xla_b=1 --xla_dump_to=/tmp/x --xla_a --xla_b=2 --xla_log_foo=1 --xla_gpu_dump_llvmir "
             "--xla_enable_dumping=true --xla_hlo_profile '--xla_c=x y'")
    assert codegen_xla_flags(flags) == ("--xla_a", "--xla_b=2", "--xla_c=x y", "--xla_hlo_profile")
    assert codegen_xla_flags("") == ()
    assert codegen_xla_flags("--xla_a='unbalanced") == ("--xla_a='unbalanced",)


def test_cpu_flags_and_level(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nfpu_exception\t: yes\nflags\t\t: sse avx2 avx\n\nprocessor\t: 1\nflags\t: x\n")
    assert envmod._cpu_flags(str(cpuinfo)) == {"sse", "avx", "avx2"}
    assert envmod._cpu_flags(str(tmp_path / "missing")) is None
    assert envmod._cpu_level("x86_64", frozenset({"avx512f", "avx2"})) == "avx512"
    assert envmod._cpu_level("x86_64", frozenset({"sse4_2"})) == "sse4"
    assert envmod._cpu_level("x86_64", frozenset()) == "x86_64"
    assert envmod._cpu_level("aarch64", frozenset({"asimd", "sve"})) == "sve"
    assert envmod._cpu_level("arm64", frozenset()) == "neon"


def test_jaxlib_fingerprint_is_stable_and_memoized(cache_dir):
    start = time.perf_counter()
    first = jaxlib_build_fingerprint()
    cold = time.perf_counter() - start
    start = time.perf_counter()
    second = jaxlib_build_fingerprint()
    warm = time.perf_counter() - start
    assert first == second and re.fullmatch(r"[0-9a-f]{16}", first)
    memo = json.loads((cache_dir / fpmod.MEMO_FILENAME).read_text())
    jaxlib_dir = fpmod._library_roots()[0]
    libraries = {str(p) for p in jaxlib_dir.rglob("*") if p.is_file() and re.search(fpmod._LIBRARY_PATTERN, p.name)}
    assert libraries and libraries <= memo["files"].keys()
    assert warm < cold / 3, (cold, warm)  # hashing ~350 MB vs. a few stat calls


def _fake_package(root: Path, name="jaxlib") -> Path:
    pkg = root / name
    (pkg / "sub").mkdir(parents=True)
    (pkg / "_core.so").write_bytes(b"\x7fELF core" * 1000)
    (pkg / "sub" / "libplugin.so.12").write_bytes(b"\x7fELF plugin")
    (pkg / "__init__.py").write_text("# not a library\n")
    return pkg


def test_fingerprint_follows_library_contents(tmp_path):
    memo = tmp_path / "memo.json"
    original = _fake_package(tmp_path / "a")
    fingerprint = fpmod._fingerprint_dirs([original], memo)
    assert re.fullmatch(r"[0-9a-f]{16}", fingerprint)

    same = shutil.copytree(original, tmp_path / "b" / "jaxlib")
    (same / "__init__.py").write_text("# other text, still not a library\n")
    assert fpmod._fingerprint_dirs([same], memo) == fingerprint  # relative paths and contents only

    changed = shutil.copytree(original, tmp_path / "c" / "jaxlib")
    data = bytearray((changed / "_core.so").read_bytes())
    data[100] ^= 1
    (changed / "_core.so").write_bytes(bytes(data))
    assert fpmod._fingerprint_dirs([changed], memo) != fingerprint

    renamed = shutil.copytree(original, tmp_path / "d" / "jaxlib")
    (renamed / "_core.so").rename(renamed / "_core2.so")
    assert fpmod._fingerprint_dirs([renamed], memo) != fingerprint

    # An in-place edit is noticed through the stat key (mtime), not by trusting the memo.
    stat = (original / "_core.so").stat()
    (original / "_core.so").write_bytes(bytes(data))
    os.utime(original / "_core.so", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert fpmod._fingerprint_dirs([original], memo) == fpmod._fingerprint_dirs([changed], None)


def test_fingerprint_reads_the_memo(tmp_path):
    memo = tmp_path / "memo.json"
    pkg = _fake_package(tmp_path)
    fingerprint = fpmod._fingerprint_dirs([pkg], memo)
    data = json.loads(memo.read_text())
    assert sorted(data["files"]) == sorted(str(p) for p in [pkg / "_core.so", pkg / "sub" / "libplugin.so.12"])
    # Doctor a memoized digest while the file's stat is unchanged: the memo, not the file, is what is read.
    data["files"][str(pkg / "_core.so")]["sha256"] = "0" * 64
    memo.write_text(json.dumps(data))
    assert fpmod._fingerprint_dirs([pkg], memo) != fingerprint
    assert fpmod._fingerprint_dirs([pkg], None) == fingerprint


def test_fingerprint_survives_bad_or_unwritable_memo(tmp_path):
    pkg = _fake_package(tmp_path)
    expected = fpmod._fingerprint_dirs([pkg], None)
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    assert fpmod._fingerprint_dirs([pkg], corrupt) == expected
    assert json.loads(corrupt.read_text())["version"] == 1  # replaced by a good one
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert fpmod._fingerprint_dirs([pkg], blocker / "memo.json") == expected  # mkdir fails: ignored
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("kind", ["fifo", "devzero", "deep", "huge-number"])
def test_planted_memo_is_refused_unread_and_rewritten(tmp_path, kind):
    """A FIFO at the memo's name used to hang jax.jit, a link to /dev/zero was read whole, a deeply nested
    memo raised RecursionError forever: each is now refused without blocking or reading it, the fingerprint
    is recomputed, and a regular memo replaces the planted name (a link's target is never written)."""
    pkg = _fake_package(tmp_path)
    expected = fpmod._fingerprint_dirs([pkg], None)
    memo = tmp_path / "memo.json"
    if kind == "fifo":
        os.mkfifo(memo)
    elif kind == "devzero":
        memo.symlink_to("/dev/zero")
    elif kind == "deep":
        memo.write_text("[" * 100_000 + "]" * 100_000)
    else:
        memo.write_text('{"version": 1, "files": {"x": ' + "9" * 5000 + "}}")
    assert fpmod._load_memo(memo) == {}
    assert fpmod._fingerprint_dirs([pkg], memo) == expected
    assert not memo.is_symlink() and memo.is_file()
    assert json.loads(memo.read_text())["version"] == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_memo_at_a_folder_is_left_and_fingerprint_still_computed(tmp_path):
    pkg = _fake_package(tmp_path)
    memo = tmp_path / "memo.json"
    (memo / "inner").mkdir(parents=True)
    assert fpmod._fingerprint_dirs([pkg], memo) == fpmod._fingerprint_dirs([pkg], None)
    assert (memo / "inner").is_dir()


def test_module_import_does_not_import_jax():
    code = ("import sys, xlakit; before = set(sys.modules); import xlakit._jax.environment; "
            "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('jax', 'jaxlib')))")
    out = subprocess.run([sys.executable, "-c", code], env=worker_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"
