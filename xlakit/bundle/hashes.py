"""The module-hash record ``<bundle>/.cache/module_hashes.json`` and what it says to drop.

Compiled programs are stored under the key ``<module stem>-<SHA-256 of the module file>`` (e.g.
``model.b8-3f2a...``; a program compiled at batch size 3 from a shape-polymorphic module is
``model.bpoly-3f2a...-b3``) in every environment partition of ``<bundle>/.cache``, so a program is only ever
loaded for the exact module bytes it was compiled from. The record remembers each module file's hash at the
last load; when a module's hash changed, or its file disappeared, every program of its old hash is removed
from every partition (programs of other environments included: they were compiled from a module that no
longer exists). Weights never enter a key, so a weights-only update keeps every program.

An unreadable record (not JSON, nested too deep, non-finite numbers, wrong shape, bad hash strings, a
symlink, a FIFO or any other non-regular file, over 16 MiB) is never trusted: the drop decision then comes
from the store itself — every entry keyed like a program of a module the manifest names, but of another
hash, is removed (entries of any other form, e.g. transparent-mode ``jit_...`` entries, are left alone) —
and the record is rewritten. A missing record (first load, or a copied ``.cache`` without it) is handled the same
way, silently.

Record format (version 1)::

    {"format_version": 1, "modules": {"model.b1.jaxexp": "<sha256 hex>", ...}}

No JAX here.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from xlakit._record import Record
from xlakit.bundle.files import MAX_JSON_BYTES, MAX_JSON_DEPTH, read_regular, write_atomic
from xlakit.bundle.manifest import MODULE_SUFFIX
from xlakit.store import safejson

__all__ = ["RECORD", "RecordState", "Drop", "sha256_hex", "program_key", "read_record", "write_record",
           "plan_drops"]

RECORD = "module_hashes.json"
_VERSION = 1


def _is_sha256_hex(text: str) -> bool:
    """64 lowercase hex digits (what :func:`sha256_hex` returns)."""
    return len(text) == 64 and not text.strip("0123456789abcdef")


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data`` (64 characters)."""
    return hashlib.sha256(data).hexdigest()


def program_key(module_file: str, sha256: str, batch_size: int | None = None) -> str:
    """The store key of the program compiled from ``module_file`` whose bytes hash to ``sha256``; with
    ``batch_size``, of the program compiled at that batch size from a shape-polymorphic module."""
    stem = module_file[: -len(MODULE_SUFFIX)] if module_file.endswith(MODULE_SUFFIX) else module_file
    return f"{stem}-{sha256}" + (f"-b{batch_size}" if batch_size is not None else "")


def _derived(key: str, base: str) -> bool:
    """True when ``key`` is ``base`` or a batch-size instance of it (``<base>-b<n>``)."""
    return key == base or (key.startswith(base + "-b") and key[len(base) + 2:].isdigit())


def _bundle_key(key: str, stems: set[str]) -> bool:
    """True when ``key`` is ``<stem><sha256 hex>`` or ``<stem><sha256 hex>-b<n>`` for one of ``stems``
    (each ``"<module stem>-"``): a key the bundle loader itself writes."""
    for stem in stems:
        if key.startswith(stem):
            rest = key[len(stem):]
            digest, sep, batch = rest.partition("-")
            if _is_sha256_hex(digest) and (not sep or (batch.startswith("b") and batch[1:].isdigit())):
                return True
    return False


def _is_entry(path: Path) -> bool:
    """A regular file (never a symlink) at ``path``."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _keys_from(store, partition: str, base: str) -> list[str]:
    """Keys in ``partition`` that are ``base`` or its batch-size instances (file names only; no reads)."""
    pdir = Path(store.root) / partition
    try:
        if not stat.S_ISDIR(os.lstat(pdir).st_mode):
            return []
        names = [e.name for e in os.scandir(pdir) if e.is_file(follow_symlinks=False)]
    except OSError:
        return []
    return sorted(n[:-4] for n in names if n.endswith(".xlk") and _derived(n[:-4], base))


class RecordState(Record):
    """What was found at ``.cache/module_hashes.json``.

    Attributes:
      status: ``"ok"``, ``"missing"`` or ``"unreadable"``.
      hashes: module file -> SHA-256 hex (empty unless ``ok``).
      reason: why it is unreadable, else None.
      path: the record's path.
    """

    status: str
    hashes: Mapping[str, str]
    reason: str | None
    path: Path


class Drop(Record):
    """A stored program that a load removes: ``key`` in ``partition``, from ``module`` (file), and why."""

    partition: str
    key: str
    module: str | None
    reason: str


def read_record(cache_dir: str | Path) -> RecordState:
    """Read the record; never raises for its content (a bad one is ``unreadable`` with the reason)."""
    path = Path(cache_dir) / RECORD
    try:
        text = read_regular(path, MAX_JSON_BYTES, follow_symlinks=False)
    except FileNotFoundError:
        return RecordState("missing", {}, None, path)
    except OSError as e:
        if getattr(e, "errno", None) == errno.ELOOP:  #: O_NOFOLLOW met a symlink
            return RecordState("unreadable", {}, "a symlink (never followed)", path)
        return RecordState("unreadable", {}, f"{type(e).__name__}: {e}", path)
    try:
        data = safejson.loads(text, MAX_JSON_DEPTH)
    except ValueError as e:  # safejson.UnsafeJson
        return RecordState("unreadable", {}, f"not valid JSON: {e}", path)
    if not isinstance(data, dict) or data.get("format_version") != _VERSION:
        return RecordState("unreadable", {}, f"expected an object with format_version {_VERSION}", path)
    modules = data.get("modules")
    if not isinstance(modules, dict):
        return RecordState("unreadable", {}, "field 'modules' is missing or not an object", path)
    for name, digest in modules.items():
        if not (isinstance(digest, str) and _is_sha256_hex(digest)):
            return RecordState("unreadable", {}, f"field 'modules.{name[:80]}' is not a SHA-256 hex digest", path)
        if not name.endswith(MODULE_SUFFIX) or "/" in name or "\\" in name or name.startswith("."):
            return RecordState("unreadable", {}, f"field 'modules.{name[:80]}' is not a module file name", path)
    return RecordState("ok", dict(modules), None, path)


def write_record(cache_dir: str | Path, hashes: Mapping[str, str]) -> Path:
    """Write the record atomically (creating ``cache_dir`` 0700 if needed). Raises OSError."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = cache_dir / RECORD
    body = {"format_version": _VERSION, "modules": dict(sorted(hashes.items()))}
    write_atomic(path, (json.dumps(body, indent=2) + "\n").encode("utf-8"))
    return path


def plan_drops(store, record: RecordState, current: Mapping[str, str | None]) -> list[Drop]:
    """The programs a load removes, in every partition of ``store`` (a :class:`~xlakit.store.LocalStore`).

    Args:
      store: the bundle's ``.cache`` store (only listed and probed; nothing is removed here).
      record: :func:`read_record`'s result.
      current: every module file the manifest names -> its SHA-256 now, or None if the file is missing.

    With a readable record: for each recorded module whose hash changed, whose file disappeared or that the
    manifest no longer names, the program of its recorded hash in each partition that holds one. Otherwise
    (record missing or unreadable): every entry whose key has the form of a bundle program key
    (``<stem of a module the manifest names>-<sha256>[-b<n>]``) but not a current module's hash; entries
    of any other form (transparent-mode ``jit_...`` entries in the same folder) are never dropped.
    """
    partitions = store.partitions()
    drops: list[Drop] = []
    if record.status == "ok":
        for module, old in sorted(record.hashes.items()):
            new = current.get(module, "absent")
            if new == old:
                continue
            if new == "absent":
                why = f"{module} is no longer in the manifest"
            elif new is None:
                why = f"{module} disappeared"
            else:
                why = f"{module} changed (sha256 {old[:12]}… -> {new[:12]}…)"
            base = program_key(module, old)
            for part in partitions:
                for key in _keys_from(store, part, base):
                    drops.append(Drop(part, key, module, why))
        return drops
    keep = {program_key(m, h) for m, h in current.items() if h}
    stems = {program_key(m, "") for m in current}  # "<module stem>-": the prefix of every key the bundle writes
    why = ("no module-hash record" if record.status == "missing"
           else f"module-hash record unreadable ({record.reason}); kept only programs of current modules")
    for info in store.entries():
        # Only keys the bundle itself writes (<stem of a module the manifest names>-<sha256>[-b<n>]) may go;
        # anything else in a real .cache folder (transparent-mode jit entries, another tool's) is not ours.
        if _bundle_key(info.key, stems) and not any(_derived(info.key, k) for k in keep):
            named = info.header.get("module_file") if isinstance(info.header, dict) else None
            drops.append(Drop(info.partition, info.key, named if isinstance(named, str) else None,
                              f"not compiled from any current module; {why}"))
    return drops
