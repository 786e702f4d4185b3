"""The environment partition: everything outside a program that decides whether its executable can be reused.

A compiled XLA executable is only valid for the jaxlib build, backend, devices, host CPU features and
code-generating ``XLA_FLAGS`` it was compiled under. :class:`Environment` records those values and
:meth:`Environment.partition_name` turns them into a readable folder name, so executables from different
environments never meet.

Importing this module is cheap: JAX is imported inside the functions that need it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform as _platform
import re
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from xlakit._record import Record
from xlakit.store import _fs as store_fs
from xlakit.store import safejson
from xlakit.store.layout import FINGERPRINT_MEMO
from xlakit.store.stamp import SETTLE_NS, stat_stamp, walked_paths

__all__ = ["Environment", "current_environment", "expectations", "jaxlib_build_fingerprint",
           "prefetch_build_fingerprint", "use_memo_dir"]

CACHE_DIR_ENV = "XLAKIT_CACHE_DIR"
MEMO_FILENAME = FINGERPRINT_MEMO
_MEMO_VERSION = 1

# Shared libraries (foo.so, libfoo.so.12, macOS/Windows); patterns compiled on first use, not on import (0.55 ms).
_LIBRARY_PATTERN = r"\.(so(\.\d+)*|dylib|pyd|dll)$"
# Top-level packages that carry PJRT plugins (their compilers generate the code, so they belong to the build).
_PLUGIN_PACKAGE_PATTERN = r"^(jax_plugins|jax_(cuda|rocm)\d*_(plugin|pjrt)|libtpu)$"
_PLUGIN_PREFIXES = ("jax_", "libtpu")  # every name _PLUGIN_PACKAGE_PATTERN matches starts with one of these
# XLA flags that only decide what gets dumped or logged; they never change the generated code.
_OUTPUT_ONLY_FLAG_PREFIXES = ("--xla_dump", "--xla_log", "--xla_gpu_dump", "--xla_enable_dumping")
# XLA flags that change what the process has (how many host devices), not what a program compiles to (JAX's key).
_PROCESS_ONLY_FLAGS = frozenset({"--xla_force_host_platform_device_count"})
# Environment fields recorded for people (explain, the CLI) that do not partition. How many devices or processes
# this process has changes neither a program's code nor whether it loads: the program's own device count, kinds
# and process layout are in its key (xlakit._jax.keys), and the stored device assignment is checked against the
# caller's before XLA sees it.
RECORDED_ONLY = frozenset({"device_count", "process_count"})
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


class Environment(Record):
    """The values an executable's validity depends on, beyond the program itself.

    Attributes:
      jax_version: ``jax.__version__``.
      jaxlib_version: ``jaxlib.version.__version__``.
      jaxlib_build: 16 hex digits identifying the jaxlib build itself (see :func:`jaxlib_build_fingerprint`);
        two builds with the same version string (nightlies, local builds) still differ here.
      platform: ``backend.platform``, e.g. ``"cpu"``, ``"gpu"``, ``"tpu"``.
      platform_version: ``backend.platform_version`` (on GPU it names the CUDA/ROCm versions).
      runtime_type: ``backend.runtime_type``, or ``""`` where the backend has none.
      device_kinds: sorted distinct ``device.device_kind`` of ``jax.devices(backend)``.
      device_count: ``len(jax.devices(backend))``.
      process_count: ``jax.process_count(backend)``.
      compute_capability: ``str(device.compute_capability)`` of device 0 (e.g. ``"9.0"``), ``None`` where
        the device has none (CPU, TPU).
      machine: ``platform.machine()``, e.g. ``"x86_64"``.
      cpu_flags_hash: 8 hex digits of SHA-256 over the sorted ``flags`` (x86) or ``Features`` (ARM) of the
        first CPU in ``/proc/cpuinfo``; ``""`` where that file is unreadable (non-Linux).
      cpu_level: readable CPU tier: ``"avx512"``, ``"avx2"``, ``"avx"``, ``"sse4"`` on x86, ``"sve"`` or
        ``"neon"`` on ARM, else ``machine``.
      xla_flags: the code-generating tokens of ``os.environ["XLA_FLAGS"]``: sorted, the last value kept per
        flag name, without dump/log flags (``--xla_dump*``, ``--xla_log*``, ``--xla_gpu_dump*``,
        ``--xla_enable_dumping``) and without ``--xla_force_host_platform_device_count``.

    ``device_count`` and ``process_count`` are recorded but do not partition (``RECORDED_ONLY``).
    """

    jax_version: str
    jaxlib_version: str
    jaxlib_build: str
    platform: str
    platform_version: str
    runtime_type: str
    device_kinds: tuple[str, ...]
    device_count: int
    process_count: int
    compute_capability: str | None
    machine: str
    cpu_flags_hash: str
    cpu_level: str
    xla_flags: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field, tuples as lists."""
        return {name: _jsonable(value) for name, value in zip(self._fields, self, strict=True)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Environment:
        """Inverse of :meth:`to_dict`. Raises ValueError if ``data`` lacks a field or has an unknown one."""
        names = cls._fields
        missing = sorted(set(names) - data.keys())
        unknown = sorted(data.keys() - set(names))
        if missing or unknown:
            raise ValueError(f"not an Environment dict: missing fields {missing}, unknown fields {unknown}")
        return cls(**{name: tuple(data[name]) if isinstance(data[name], list) else data[name]  # type: ignore[arg-type]
                      for name in names})

    def digest(self) -> str:
        """Full hex SHA-256 over the canonical JSON (sorted keys, no whitespace) of :meth:`to_dict` without the
        fields that do not partition (``device_count``, ``process_count``; see ``RECORDED_ONLY``)."""
        fields = {k: v for k, v in self.to_dict().items() if k not in RECORDED_ONLY}
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return _sha256(canonical)

    def partition_name(self) -> str:
        """Readable folder name, unique per environment.

        ``{platform}[-sm{cc}]-jaxlib{jaxlib_version}-{machine}-{cpu_level}-{digest[:8]}``, e.g.
        ``cpu-jaxlib0.10.2-x86_64-avx2-1a2b3c4d`` or ``gpu-sm90-jaxlib0.10.2-x86_64-avx512-...``. The readable
        parts are for people; the digest makes it unique. Only ``[A-Za-z0-9_.-]`` occur.
        """
        parts = [self.platform]
        if self.compute_capability:
            parts.append("sm" + self.compute_capability.replace(".", ""))
        parts += ["jaxlib" + self.jaxlib_version, self.machine, self.cpu_level, self.digest()[:8]]
        return "-".join(_safe_name(part) for part in parts)

    def differences(self, other: Environment) -> list[tuple[str, Any, Any]]:
        """``(field, value here, value in other)`` for each field that differs, in declaration order."""
        return [(name, mine, theirs) for name, mine, theirs in zip(self._fields, self, other, strict=True)
                if mine != theirs]


@functools.cache
def current_environment(backend: str | None = None) -> Environment:
    """The :class:`Environment` of this process for ``backend`` (``None``: JAX's default backend).

    Memoized per ``backend`` for the life of the process (``current_environment.cache_clear()`` resets it), so
    ``XLA_FLAGS`` is read when first computed; that matches JAX, which reads the flags once when the backend
    starts, and later changes affect neither.

    Raises:
      RuntimeError: from JAX if ``backend`` is unknown or absent (e.g. ``"gpu"`` on a CPU-only install).
    """
    import jax
    from jaxlib import version as jaxlib_version

    devices = jax.devices(backend)
    client = devices[0].client  # the backend itself; jax.extend.backend would import Pallas (~0.1-0.3 s) first
    build = _prefetched_fingerprint()
    capability = getattr(devices[0], "compute_capability", None)
    machine = _platform.machine()
    cpu_flags = _cpu_flags()
    return Environment(
        jax_version=jax.__version__,
        jaxlib_version=jaxlib_version.__version__,
        jaxlib_build=build if build is not None else jaxlib_build_fingerprint(),
        platform=client.platform,
        platform_version=client.platform_version,
        runtime_type=getattr(client, "runtime_type", ""),
        device_kinds=tuple(sorted({d.device_kind for d in devices})),
        device_count=len(devices),
        process_count=jax.process_count(backend),
        compute_capability=None if capability is None else str(capability),
        machine=machine,
        cpu_flags_hash="" if cpu_flags is None else _sha256(" ".join(sorted(cpu_flags)))[:8],
        cpu_level=_cpu_level(machine, cpu_flags or frozenset()),
        xla_flags=codegen_xla_flags(os.environ.get("XLA_FLAGS", "")),
    )


def codegen_xla_flags(xla_flags: str) -> tuple[str, ...]:
    """The tokens of an ``XLA_FLAGS`` string that can change generated code: sorted, last value per flag name,
    dump/log flags and ``--xla_force_host_platform_device_count`` dropped. Quoted values are kept whole
    (``shlex``); unbalanced quotes fall back to splitting on whitespace."""
    if not xla_flags.strip():
        return ()
    import shlex

    try:
        tokens = shlex.split(xla_flags)
    except ValueError:
        tokens = xla_flags.split()
    by_name = {}
    for token in tokens:
        if not token.startswith(_OUTPUT_ONLY_FLAG_PREFIXES) and token.split("=", 1)[0] not in _PROCESS_ONLY_FLAGS:
            by_name[token.split("=", 1)[0]] = token  # XLA applies flags in order, so the last one wins.
    return tuple(sorted(by_name.values()))


def jaxlib_build_fingerprint() -> str:
    """16 hex digits of SHA-256 over the name and contents of every shared library of jaxlib and of the
    installed PJRT plugin packages (``jax_plugins``, ``jax_cuda*_plugin``, ``jax_cuda*_pjrt``, ``libtpu``).

    Hashing the ~350 MB of libraries costs about 0.5 s per process start (measured with jaxlib 0.10.2 on a 2-core
    AMD EPYC, warm page cache: 0.49 s cold, 3-4 ms memoized), so per-file digests are memoized in
    ``jaxlib_fingerprints.json`` under ``$XLAKIT_CACHE_DIR`` (default ``platformdirs.user_cache_dir("xlakit")``),
    keyed by path, size, mtime, ctime and inode; only files whose stat changed are read again. A cache created with
    an explicit folder calls :func:`use_memo_dir` first, so the memo lives beside the cache actually in use.

    Per search path (jaxlib's location and ``sys.path``) the memo also keeps a *stamp*: a SHA-256 over the stat
    (device, inode, size, mtime, ctime) of every folder whose listing decided which libraries exist and of every
    library. While it holds, nothing there was added, removed, replaced or written, and the fingerprint is
    taken without walking (~1 ms instead of ~3 ms, measured). It is recorded only when every stat it covers is
    older than :data:`~xlakit.store.stamp.SETTLE_NS` before the walk began (no change hides within a tick), and
    only in the memo of ``$XLAKIT_CACHE_DIR`` or the user cache (not in one beside a cache of capped size).

    Raises:
      ImportError: if jaxlib is not installed.
      OSError: if a library cannot be read. Failing to read or write the memo is not an error.
    """
    memo_path = _cache_dir() / MEMO_FILENAME
    key = _search_path() if _memo_dir is None else None  # no stamp beside a cache: its bytes count against the cap
    return (key and _stamped_fingerprint(memo_path, key)) or _fingerprint_dirs(None, memo_path, stamp=key)


def _stamped_fingerprint(memo_path: str | os.PathLike, key: str) -> str | None:
    """The fingerprint the memo holds for search path ``key`` while its stamp still holds, else None. A
    ``sys.path`` folder whose stat changed (a script's own folder) is listed again: only its plugin packages count."""
    files, trees = _read_memo(memo_path)
    tree: Any = trees.get(key)
    try:
        if not all(isinstance(p, str) for p in [*tree["walked"], *tree["listed"]]) or \
                tree["stamp"] != stat_stamp(walked_paths(tree["walked"], files))[0]:
            return None
        for folder, (folder_stamp, names) in tree["listed"].items():
            if stat_stamp([folder])[0] != folder_stamp and _plugin_packages(folder) != names:
                return None
        return str(tree["fingerprint"])
    except (KeyError, TypeError, ValueError):  # no stamp, or not the shape written below
        return None


def _search_path() -> str:
    """A digest of where libraries are searched: jaxlib's package folders and ``sys.path``, made absolute."""
    spec = importlib.util.find_spec("jaxlib")  # the module's own spec once imported: no search
    where = [list(spec.submodule_search_locations or []) if spec is not None else [],
             [os.path.abspath(entry or ".") for entry in sys.path]]
    return _sha256(json.dumps(where))[:32]


_prefetch_lock = threading.Lock()
_prefetch: tuple[threading.Thread, list[str]] | None = None  # (worker, [fingerprint] once it is computed)


def prefetch_build_fingerprint() -> None:
    """Start computing :func:`jaxlib_build_fingerprint` on a daemon thread (file reads only: it touches neither
    JAX nor its backend), so that the first :func:`current_environment` — inside the first compile of a process
    that just enabled a cache — takes the value instead of computing it then. That call waits for the thread if
    it is still running; if it failed, computes the value itself (raising as before). Used once."""
    global _prefetch
    with _prefetch_lock:
        if _prefetch is not None:
            return
        result: list[str] = []

        def work() -> None:
            try:
                result.append(jaxlib_build_fingerprint())
            except Exception:  # noqa: BLE001 - the caller computes it again and sees the error itself
                pass

        worker = threading.Thread(target=work, name="xlakit-fingerprint", daemon=True)
        _prefetch = (worker, result)
        worker.start()


def _prefetched_fingerprint() -> str | None:
    """The prefetched fingerprint (waiting for its thread), once; None when there is none."""
    global _prefetch
    with _prefetch_lock:
        taken, _prefetch = _prefetch, None
    if taken is None:
        return None
    worker, result = taken
    worker.join()
    return result[0] if result else None


_memo_dir: Path | None = None


def use_memo_dir(folder: str | os.PathLike | None, *, only_if: str | os.PathLike | None = None) -> None:
    """Keep the jaxlib fingerprint memo in ``folder`` (the cache in use) instead of ``$XLAKIT_CACHE_DIR`` or the
    user cache. ``None`` goes back to the default; with ``only_if``, only while the memo folder is that one (a
    cache that closes resets only its own setting)."""
    global _memo_dir
    if only_if is not None and _memo_dir != Path(only_if):
        return
    _memo_dir = None if folder is None else Path(folder)


_EXPECTED_FIELDS = ("jax_version", "jaxlib_version", "jaxlib_build", "platform", "platform_version", "machine",
                    "cpu_flags_hash")


def expectations(env: Environment) -> dict[str, Any]:
    """Header fields an entry must carry to be loaded in ``env``: another build's programs are never loaded."""
    values = env.to_dict()
    return {name: values[name] for name in _EXPECTED_FIELDS}


def _cache_dir() -> Path:
    if _memo_dir is not None:
        return _memo_dir
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured)
    import platformdirs

    return Path(platformdirs.user_cache_dir("xlakit"))


def _library_roots(listed: dict[str, list] | None = None) -> list[Path]:
    """jaxlib's package folder and every PJRT plugin package folder on ``sys.path``; ``listed`` gets ``folder ->
    [its stamp, taken before listing it, or "" when too recent; plugin package names]`` per ``sys.path`` folder."""
    spec = importlib.util.find_spec("jaxlib")  # finds the package without importing (and loading) it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("jaxlib is not installed")
    roots = [Path(p) for p in spec.submodule_search_locations]
    for entry in sys.path:
        # Scanning sys.path ourselves also finds namespace packages such as jax_plugins, which pkgutil skips.
        directory = os.path.abspath(entry or ".")
        stamp = stat_stamp([directory])
        names = _plugin_packages(directory)
        if listed is not None:
            listed[directory] = [stamp[0] if stamp[1] < time.time_ns() - SETTLE_NS else "", names]
        roots += [Path(directory) / n for n in names]
    unique: dict[str, Path] = {}
    for root in roots:
        unique.setdefault(os.path.realpath(root), root)
    return list(unique.values())


def _plugin_packages(directory: str) -> list[str]:
    """Sorted names of the plugin package folders in ``directory`` ([] where it cannot be listed: a zip file,
    missing). Sorted after filtering: site-packages holds hundreds of names, and every plugin name starts so."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(_PLUGIN_PREFIXES) and re.match(_PLUGIN_PACKAGE_PATTERN, n)
                  and os.path.isdir(os.path.join(directory, n)))


def _fingerprint_dirs(roots: Iterable[str | os.PathLike] | None, memo_path: str | os.PathLike | None,
                      stamp: str | None = None) -> str:
    """16 hex digits of SHA-256 over ``relative path, file digest`` of every shared library under ``roots``
    (None: :func:`_library_roots`), sorted by the path relative to the root's parent (``jaxlib/_jax.so``).
    Per-file digests are read from and written to ``memo_path`` (``None``: no memo). ``stamp``: a key to record
    this walk's stamp under (see :func:`jaxlib_build_fingerprint`)."""
    started = time.time_ns()
    files, walked, listed = [], [], {}  # type: ignore[var-annotated]
    roots = _library_roots(listed) if roots is None else roots
    for root in roots:
        root = Path(root).absolute()
        for dirpath, _, filenames in os.walk(root):
            walked.append(dirpath)
            files += [(os.path.relpath(os.path.join(dirpath, n), root.parent), os.path.join(dirpath, n))
                      for n in filenames if re.search(_LIBRARY_PATTERN, n)]
    files.sort()
    memo, trees = _read_memo(memo_path) if memo_path is not None else ({}, {})
    changed = False
    total = hashlib.sha256()
    for relative, path in files:
        stat = os.stat(path)
        # A reinstall creates new files (new inode and mtime), so this stat identifies the contents; ctime also
        # moves on an in-place write whose mtime was put back (which only the ctime shows).
        key = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns, "ino": stat.st_ino}
        entry = memo.get(path)
        if not isinstance(entry, dict) or any(entry.get(k) != v for k, v in key.items()) or "sha256" not in entry:
            with open(path, "rb") as f:
                entry = memo[path] = {**key, "sha256": hashlib.file_digest(f, "sha256").hexdigest()}
            changed = True
        total.update(f"{relative}\0{entry['sha256']}\n".encode())
    fingerprint = total.hexdigest()[:16]
    if stamp is not None:
        digest, newest = stat_stamp(walked_paths(walked, [path for _, path in files]))
        if newest < started - SETTLE_NS:
            trees = {k: v for k, v in list(trees.items())[-15:] if k != stamp}  # a few search paths, not all
            trees[stamp] = {"walked": walked, "stamp": digest, "listed": listed, "fingerprint": fingerprint}
            changed = True
    if changed and memo_path is not None:
        _save_memo(Path(memo_path), memo, trees)
    return fingerprint


_MAX_MEMO_BYTES = 8 * 1024 * 1024  # a memo of ~200 libraries is ~40 kB; anything near this bound is not ours


def _load_memo(path: str | os.PathLike) -> dict[str, Any]:
    return _read_memo(path)[0]


def _read_memo(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(per-file digests, stamps by search path)``, or {} (recompute, then rewrite) when the memo is absent, a
    link, a FIFO, a device, a folder, over 8 MiB, not bounded JSON (too deep, huge numbers) or not its shape.
    Read with the store's primitives: never follows a link, never blocks, size-bounded before reading."""
    try:
        data = safejson.load_file(path, _MAX_MEMO_BYTES)
    except (OSError, ValueError):  # absent, unreadable, refused or corrupt: recompute and rewrite
        return {}, {}
    if not isinstance(data, dict) or data.get("version") != _MEMO_VERSION or not isinstance(data.get("files"), dict):
        return {}, {}
    trees = data.get("trees")
    return data["files"], trees if isinstance(trees, dict) else {}


def _save_memo(path: Path, files: dict[str, Any], trees: dict[str, Any] | None = None) -> None:
    """Atomically replace the memo; every OSError is ignored so a read-only disk only costs speed.

    Written relative to the folder's descriptor (temp created O_EXCL|O_NOFOLLOW, renamed over the name), so a
    planted link, FIFO or file at the memo's name is replaced, never written through; a folder there is
    left alone (the memo is then recomputed each process)."""
    # Other virtualenvs share the memo; drop only entries whose library is gone.
    files = {p: e for p, e in files.items() if os.path.exists(p)}
    try:
        store_fs.ensure_dir(path.parent)
        with store_fs.dir_fd(os.path.realpath(path.parent)) as fd:
            # readers see the old memo or the new one, never half of one
            data = json.dumps({"version": _MEMO_VERSION, "files": files, "trees": trees or {}}, sort_keys=True,
                              separators=(",", ":"))  # compact: the memo beside a cache counts against its cap
            store_fs.write_at(fd, path.name, data.encode("utf-8"))
    except OSError:
        pass


def _cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The ``flags`` (x86) or ``Features`` (ARM) of the first CPU in ``cpuinfo``; ``None`` if unreadable."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


def _cpu_level(machine: str, flags: frozenset[str]) -> str:
    if machine.lower() in ("aarch64", "arm64"):
        return "sve" if "sve" in flags else "neon"  # every aarch64 CPU has NEON
    for flag, level in (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4"),
                        ("sse4_1", "sse4")):
        if flag in flags:
            return level
    return machine or "unknown"


def _safe_name(part: str) -> str:
    """``part`` with every run of characters outside ``[A-Za-z0-9_.-]`` replaced by ``_``; ``unknown`` if empty."""
    if part and _NAME_CHARS.issuperset(part):
        return part
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", part) or "unknown"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
