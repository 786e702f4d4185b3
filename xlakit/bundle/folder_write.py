"""Writing an exported bundle's files into its folder: only what changed, modules first and the manifest last,
never over another bundle or a file that is not the bundle's (:func:`write_bundle_files`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from pathlib import Path

from xlakit.bundle.errors import BundleError
from xlakit.bundle.files import read_regular, remove_stale_temps, write_atomic
from xlakit.bundle.manifest import MANIFEST, MODULE_SUFFIX, WEIGHTS, Manifest
from xlakit.store import safejson

__all__ = ["write_bundle_files", "MARKER"]

MARKER = ".xlakit-export.json"  # the files an export in progress writes; removed when it completes


def write_bundle_files(path: Path, files: dict[str, bytes], overwrite: bool) -> None:
    """Write only what changed, modules first and the manifest last; refuse to replace another bundle or
    any file that is not the bundle's; remove only files the old manifest names; remove stale temps.

    A file is the bundle's when the old manifest names it, or when a killed export's marker
    (:data:`MARKER`, written before the files and removed after the manifest) names it."""
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} exists and is not a folder")
    remove_stale_temps(path)  # a killed export's temps (writer gone, or older than the bound)
    visible = _visible(path)
    old, why_not = _old_manifest(path, visible)
    marked = _marked(path)
    # An old manifest may be foreign (copied in, hand-edited, planted): it can name any file, e.g. a
    # "weights.file" of "thesis.tex". Only names an export itself would write count as the bundle's.
    owned = {n for n in (old.files if old else ()) if _bundle_name(n)} | marked
    partial = old is None and bool(marked) and visible <= marked  # a killed export's files only
    differs = [n for n in files if not _same_bytes(path / n, files[n])]
    stale = sorted(n for n in owned if n not in files and n in visible)
    if visible and old is None and not partial and not overwrite:
        raise FileExistsError(f"{path} is a non-empty folder that is not a bundle ({why_not}); pass "
                              "overwrite=True to write a bundle beside its files, or choose another path")
    if old is not None and (differs or stale) and not overwrite:
        what = ", ".join(differs + [f"{n} (no longer exported)" for n in stale])
        raise FileExistsError(f"{path} holds a different bundle ({what} differ); pass overwrite=True to replace it")
    taken = sorted(n for n in differs if n in visible and n not in owned)
    if taken:
        whose = "its manifest does not name" if old else why_not
        raise FileExistsError(f"{path} already holds {taken[:5]}, which {whose}"
                              ": they are not this bundle's files, so export_bundle will not replace them even "
                              "with overwrite=True; move them or choose another path")
    if not differs and not stale:
        if marked:
            with contextlib.suppress(OSError):
                os.unlink(path / MARKER)
        return
    path.mkdir(parents=True, exist_ok=True)
    write_atomic(path / MARKER, json.dumps({"pid": os.getpid(), "files": sorted(files)}).encode("utf-8"))
    order = sorted(n for n in differs if n != MANIFEST) + ([MANIFEST] if MANIFEST in differs else [])
    for n in order:
        write_atomic(path / n, files[n])
    for n in stale:  # named by the old manifest and no longer exported; unlink never follows a link
        try:
            os.unlink(path / n)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            pass
    try:
        os.unlink(path / MARKER)
    except OSError:
        pass


_OWN_NAME = re.compile(r"^model(\.[A-Za-z0-9_-]{1,64})?\.b(poly|[0-9]{1,9})" + re.escape(MODULE_SUFFIX) + "$")


def _bundle_name(name: str) -> bool:
    """True for a name an export writes: ``manifest.json``, ``weights.safetensors`` or a module file
    (:func:`xlakit.bundle.manifest.module_file`). Any other name a manifest lists is never replaced or
    removed by an export."""
    return name in (MANIFEST, WEIGHTS) or bool(_OWN_NAME.match(name))


def _marked(path: Path) -> set[str]:
    """File names a killed export's marker says it was writing (empty when there is no usable marker)."""
    try:
        data = safejson.loads(read_regular(path / MARKER, 1 << 20, follow_symlinks=False), max_depth=4)
    except (OSError, ValueError):
        return set()
    names = data.get("files") if isinstance(data, dict) else None
    if not isinstance(names, list):
        return set()
    return {n for n in names if isinstance(n, str) and "/" not in n and not n.startswith(".")}


def _visible(path: Path) -> set[str]:
    """Names in ``path`` that are not hidden (``.cache`` and temps are hidden)."""
    try:
        return {e.name for e in os.scandir(path) if not e.name.startswith(".")}
    except FileNotFoundError:
        return set()


def _old_manifest(path: Path, visible: set[str]) -> tuple[Manifest | None, str]:
    if MANIFEST not in visible:
        return None, f"no {MANIFEST}"
    try:
        return Manifest.read(path), ""
    except BundleError as e:
        return None, f"its {MANIFEST} is not valid: {e.problem}"


def _same_bytes(file: Path, data: bytes) -> bool:
    """True when ``file`` is a regular file holding exactly ``data`` (read only when the sizes agree)."""
    try:
        st = os.lstat(file)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
            return False
        return read_regular(file, max(len(data), 0), follow_symlinks=False) == data
    except OSError:
        return False
