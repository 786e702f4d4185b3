"""The order in which a bundle's programs were first called: ``<bundle>/.cache/usage.json``.

A background load (``load_bundle(..., background=True)``) loads the programs the last process called first, in
that order, before the others. The file is a hint, never trusted for anything else: an unreadable, oversized,
deeply nested or malformed file is ignored (and rewritten on the next first call), and a failure to write it
(read-only bundle, full disk) is ignored. Format (version 1)::

    {"format_version": 1, "first_calls": [["default", 1], ["default", 8]]}

No JAX here.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from xlakit.bundle.files import read_regular
from xlakit.store import safejson

__all__ = ["USAGE", "read_usage", "write_usage"]

USAGE = "usage.json"
_MAX_BYTES = 1 << 20
_MAX_ENTRIES = 4096
_lock = threading.Lock()


def read_usage(cache_dir: str | Path) -> list[tuple[str, int]]:
    """``[(variant, batch_size), ...]`` in first-call order, or ``[]`` when absent or unusable."""
    try:
        data = safejson.loads(read_regular(Path(cache_dir) / USAGE, _MAX_BYTES, follow_symlinks=False), 4)
    except Exception:  # noqa: BLE001 - a hint: anything wrong means "no hint"
        return []
    if not isinstance(data, dict) or data.get("format_version") != 1 or not isinstance(data.get("first_calls"), list):
        return []
    out: list[tuple[str, int]] = []
    for item in data["first_calls"][:_MAX_ENTRIES]:
        if (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)
                and not isinstance(item[1], bool) and (item[0], item[1]) not in out):
            out.append((item[0], item[1]))
    return out


def write_usage(cache_dir: str | Path, first_calls: list[tuple[str, int]]) -> bool:
    """Replace the record atomically; False (and nothing raised) when it cannot be written. ``cache_dir``
    must exist and must not be a symlink (the loader only passes a ``.cache`` it uses)."""
    from xlakit.bundle.files import write_atomic

    text = json.dumps({"format_version": 1, "first_calls": [[v, b] for v, b in first_calls[:_MAX_ENTRIES]]}).encode()
    try:
        with _lock:
            write_atomic(Path(cache_dir) / USAGE, text)
        return True
    except Exception:  # noqa: BLE001 - a hint never fails a call
        return False
