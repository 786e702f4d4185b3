"""The buffer assignments XLA's dumps gave in this process, by executable fingerprint and lowered module, and the
capture of one during a compile a cache makes anyway (see :mod:`xlakit._jax.compiler_dump` for why and what it
costs). Apart from the compile with the dump so that the hooks can use it without an import circle."""

from __future__ import annotations

import atexit
import collections
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xlakit._jax.assignment import _varint

__all__ = ["remembered", "remember", "remember_later", "of_executable", "module_key", "read_dump", "split_hlo_proto",
           "begin_capture", "end_capture",
           "capture_enabled", "MEMO_SIZE", "MEMO_BYTES", "CAPTURE_MIN_FREE_BYTES", "DUMP_SUFFIX"]

DUMP_SUFFIX = "after_optimizations.hlo.pb"  # TPU: <module>.after_..., XLA:CPU: <module>.cpu_after_...
MEMO_SIZE = 16
MEMO_BYTES = 256 << 20  # a dump holds the program's constants: bound the bytes too (a model closing over weights)
CAPTURE_MIN_FREE_BYTES = 1 << 30  # below this free in the temp folder XLA's dump would fail, one error line per file
_memo: collections.OrderedDict[Any, Any] = collections.OrderedDict()  # key -> HloProto bytes or _Later
_lock = threading.Lock()


def _fingerprint(compiled: Any) -> bytes | None:
    try:
        fp = compiled.runtime_executable().fingerprint
    except Exception:  # noqa: BLE001 - a backend without fingerprints: only the module key remembers
        return None
    return fp if isinstance(fp, bytes) and fp else None


def module_key(lowered: Any, options: Any = None) -> str | None:
    """SHA-256 of a lowered module's text without debug info plus its compile args (platform, devices) and the
    ``compiler_options`` it is compiled with (``Lowered.compile(compiler_options=...)``: they change the program),
    the in-process memo's key for a program not compiled yet; None when the text cannot be had."""
    try:
        text = lowered.as_text(debug_info=False)
    except TypeError:  # older JAX: as_text() without the keyword
        text = lowered.as_text()
    except Exception:  # noqa: BLE001
        return None
    digest = hashlib.sha256(text.encode())
    try:
        devices = lowered._lowering.compile_args.get("device_assignment")  # noqa: SLF001 - the devices it targets
        digest.update(repr([(d.platform, d.id) for d in devices or ()]).encode())
    except Exception:  # noqa: BLE001 - the platform is in the module's text where it matters
        pass
    if options:
        digest.update(repr(sorted((str(k), repr(v)) for k, v in dict(options).items())).encode())
    return "module:" + digest.hexdigest()


def remember(hlo_proto: bytes, *keys: Any) -> None:
    """Keep ``hlo_proto`` under each non-None key (an executable fingerprint, a :func:`module_key`); the oldest go
    beyond :data:`MEMO_SIZE` programs or :data:`MEMO_BYTES` bytes."""
    with _lock:
        for key in keys:
            if key is None:
                continue
            _memo[key] = hlo_proto
            _memo.move_to_end(key)
        _trim()


def _trim() -> None:
    """Drop the oldest beyond the bounds (three keys a program at most: fingerprint, module, captured); under the
    lock."""
    while len(_memo) > MEMO_SIZE * 3 or (len(_memo) > 1 and _held_bytes() > MEMO_BYTES):
        _memo.popitem(last=False)


class _Later:
    """An HloProto not read yet: ``read()`` gives it or None (a cache entry's compressed copy, see
    :func:`remember_later`); ``size`` counts what it holds now."""

    __slots__ = ("read", "size")

    def __init__(self, read: Callable[[], bytes | None], size: int):
        self.read, self.size = read, size


def remember_later(fingerprint: Any, read: Callable[[], bytes | None], size: int = 0) -> None:
    """Keep ``read`` (a callable giving the HloProto, or None) under an executable fingerprint: called the first time
    :func:`remembered` is asked for that executable (a program loaded from a cache entry that carries XLA's dump:
    decompressed only if ``xlakit.memory`` asks). ``size``: bytes it holds meanwhile."""
    if isinstance(fingerprint, bytes) and fingerprint:
        remember(_Later(read, size), fingerprint)  # type: ignore[arg-type]


def _held_bytes() -> int:
    return sum(b.size if isinstance(b, _Later) else len(b) for b in {id(b): b for b in _memo.values()}.values())


def of_executable(executable: Any) -> bytes | None:
    """The HloProto :func:`end_capture` read from the dump of the very compile that made this ``LoadedExecutable``
    (by its fingerprint), else None: never one filed under its fingerprint from elsewhere (a compile of its
    ``Lowered`` with the dump, a cache entry), which is what a new cache entry may carry on."""
    fingerprint = getattr(executable, "fingerprint", None)
    return _lookup([("captured", fingerprint)] if isinstance(fingerprint, bytes) and fingerprint else [])


def remembered(compiled: Any = None, lowered: Any = None, options: Any = None) -> bytes | None:
    """The HloProto kept for this executable (by fingerprint) or lowered module (compiled with ``options``), else
    None."""
    keys: list[Any] = []
    if compiled is not None:
        keys.append(_fingerprint(compiled))
    if lowered is not None:
        keys.append(module_key(lowered, options))
    return _lookup(keys)


def _lookup(keys: list[Any]) -> bytes | None:
    with _lock:
        for key in keys:
            if key is not None and key in _memo:
                _memo.move_to_end(key)
                found = _memo[key]
                break
        else:
            return None
    if not isinstance(found, _Later):
        return found
    try:
        data = found.read()  # outside the lock: a decompression
        if data is not None:
            split_hlo_proto(data)  # a dump with its assignment, or as if never kept (peak() compiles with one)
    except Exception:  # noqa: BLE001 - unreadable: as if never kept
        data = None
    with _lock:
        if _memo.get(key) is found:  # not replaced meanwhile by another thread
            if data is None:
                del _memo[key]
            else:
                _memo[key] = data
                _trim()  # the bytes count now
    return data


def read_dump(folder: str | os.PathLike, module_name: str | None = None) -> bytes:
    """The ``*after_optimizations.hlo.pb`` HloProto of ``module_name`` (its HLO module name, e.g. ``jit_step``)
    in a dump folder; with several candidates the largest.

    Raises:
      FileNotFoundError: the folder holds no such file (the compiler wrote no dump: an XLA without the option).
    """
    files = [p for p in Path(folder).glob(f"*{DUMP_SUFFIX}") if p.is_file()]
    if module_name:
        named = [p for p in files if f".{module_name}." in p.name]
        files = named or files
    if not files:
        listing = sorted(p.name for p in Path(folder).iterdir())[:8]
        raise FileNotFoundError(f"XLA wrote no *{DUMP_SUFFIX} into its dump folder (it holds {listing}); this XLA "
                                "does not dump its buffer assignment")
    return max(files, key=lambda p: p.stat().st_size).read_bytes()


def split_hlo_proto(hlo_proto: bytes) -> tuple[bytes, bytes | None]:
    """``(BufferAssignmentProto, HloModuleProto or None)`` of an ``HloProto`` (fields 3 and 1).

    Raises:
      ValueError: the bytes hold no buffer assignment (or are not an HloProto).
    """
    module = assignment = None
    pos, end = 0, len(hlo_proto)
    try:
        while pos < end:
            key, pos = _varint(hlo_proto, pos)
            field, wire = key >> 3, key & 7
            if wire != 2:
                raise ValueError(f"unexpected wire type {wire} in an HloProto")
            size, pos = _varint(hlo_proto, pos)
            if pos + size > end:
                raise ValueError("truncated HloProto (a field runs past its end)")
            if field == 1:
                module = hlo_proto[pos:pos + size]
            elif field == 3:
                assignment = hlo_proto[pos:pos + size]
            pos += size
    except IndexError as exc:
        raise ValueError("truncated HloProto") from exc
    if not assignment:
        raise ValueError("the HloProto carries no buffer assignment")
    return assignment, module


def capture_enabled(platform: str | None) -> bool:
    """Whether an enabled xlakit cache compiles a miss for ``platform`` (``backend.platform``) with XLA's dump: only
    where ``memory_analysis()`` carries no buffer assignment, by default where the platform table says it was
    measured harmless (:attr:`~xlakit._jax.platforms.Platform.capture_assignment_on_miss`: TPU), with
    ``XLAKIT_CAPTURE_ASSIGNMENT=1`` on any such platform, never with ``XLAKIT_CAPTURE_ASSIGNMENT=0``, and never while
    ``XLA_FLAGS`` asks for a dump of the user's own (``--xla_dump_to``), which the capture would take over."""
    from xlakit._jax import platforms

    rule = platforms.rules(platform)
    if rule.assignment_in_memory_analysis or "xla_dump_to" in os.environ.get("XLA_FLAGS", ""):
        return False
    asked = _capture_setting(os.environ.get("XLAKIT_CAPTURE_ASSIGNMENT", ""))
    return rule.capture_assignment_on_miss if asked is None else asked


_ON, _OFF = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})
_told: set[str] = set()  # values of XLAKIT_CAPTURE_ASSIGNMENT already warned about


def _capture_setting(text: str) -> bool | None:
    """``XLAKIT_CAPTURE_ASSIGNMENT`` read: True / False (``1``/``true``/``yes``/``on``, ``0``/``false``/``no``/``off``,
    any case), None when unset; any other value is one warning naming the variable, then the platform's default."""
    value = text.strip().lower()
    if not value:
        return None
    if value in _ON or value in _OFF:
        return value in _ON
    if text not in _told:
        _told.add(text)
        import warnings

        warnings.warn(f"XLAKIT_CAPTURE_ASSIGNMENT={text!r} is not understood (use 1 or 0: on or off); the platform's "
                      "default is used", RuntimeWarning, stacklevel=3)
    return None


_open: set[str] = set()  # capture folders not read yet (a compile that failed has no write to read them)
_at_exit: list[bool] = []  # whether _remove_open is registered


def _remove_open() -> None:
    for folder in list(_open):
        shutil.rmtree(folder, ignore_errors=True)
        _open.discard(folder)


def begin_capture(compile_options: Any, platform: str | None) -> str | None:
    """Add XLA's dump (a private temporary folder) to ``compile_options`` (an ``xla_client.CompileOptions``, after
    the cache key was computed from it: JAX leaves dump options out of its key, and the executable is the same)
    where :func:`capture_enabled` says so for ``platform``; returns the folder for :func:`end_capture`, or None where
    nothing was added (the capture is off there, a dump is asked for already, the temporary folder's disk has less
    than :data:`CAPTURE_MIN_FREE_BYTES` free, or the options cannot take it). Never raises."""
    if not capture_enabled(platform):
        return None
    folder = None
    try:
        overrides = list(compile_options.env_option_overrides)
        if any(name == "xla_dump_to" for name, _value in overrides):
            return None  # a dump asked for already (compile_with_assignment, the user's own): leave it be
        if shutil.disk_usage(tempfile.gettempdir()).free < CAPTURE_MIN_FREE_BYTES:
            return None  # a full disk: XLA would log an error per file and keep a cut-short dump
        folder = tempfile.mkdtemp(prefix="xlakit-xla-dump-")
        if not _at_exit:  # a failed compile's folder, left by a thread that ends: removed at exit at the latest
            _at_exit.append(True)
            atexit.register(_remove_open)
        _open.add(folder)
        compile_options.env_option_overrides = overrides + [
            ("xla_dump_to", folder), ("xla_dump_hlo_as_proto", True)]
    except Exception:  # noqa: BLE001 - no folder, or options without overrides: compile as asked
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            _open.discard(folder)
        return None
    return folder


def end_capture(folder: str | None, executable: Any, module_name: str | None) -> bool:
    """Read the HloProto :func:`begin_capture`'s compile wrote into ``folder``, remember it by ``executable``'s
    fingerprint (an ``xla_client.LoadedExecutable``, the one a ``Compiled`` of it returns from
    ``runtime_executable()``) and remove the folder. Returns whether one was remembered; never raises."""
    if folder is None:
        return False
    try:
        fingerprint = getattr(executable, "fingerprint", None)
        if not isinstance(fingerprint, bytes) or not fingerprint:
            return False
        hlo_proto = read_dump(folder, module_name)
        split_hlo_proto(hlo_proto)  # whole, with its assignment (a full disk cuts a dump short)
        remember(hlo_proto, fingerprint, ("captured", fingerprint))  # the latter: this compile's own dump
        return True
    except Exception:  # noqa: BLE001 - no dump: peak() compiles with one when asked, as without the capture
        return False
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        _open.discard(folder)
