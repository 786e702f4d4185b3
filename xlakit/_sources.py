"""Where a piece of a program came from, in the user's terms: the first frame of *user* code, and a notebook
cell's name instead of ipykernel's temporary file.

Shared by memory attribution (frames decoded from an HloModuleProto's stack frame index) and the event
timeline (the Python stack at the moment a program is traced or compiled), so both draw the line between
"your code" and "library code" in the same place. Pure Python: no JAX import, nothing run at import.

A file is *library* code when it belongs to an installed distribution or to Python itself:
- any path with a ``site-packages`` or ``dist-packages`` component (jax, flax, optax, equinox, numpy, …);
- Python's own standard library (``sysconfig`` ``stdlib`` / ``platstdlib``) and ``<frozen …>`` modules;
- xlakit's own package folder (also in a source checkout, where it is not under site-packages);
- the top-level packages in :data:`LIBRARY_PACKAGES` wherever they live (an editable jax checkout).
Everything else — a script, a test file, a notebook cell, ``<stdin>`` — is *user* code.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import sysconfig
import types
from collections.abc import Iterable

__all__ = ["LIBRARY_PACKAGES", "Frame", "is_library_file", "library_package", "first_user_frame",
           "display_file", "describe", "user_stacklevel"]

#: Top-level packages whose frames are never "the user's line", even from a source checkout.
LIBRARY_PACKAGES = frozenset({
    "jax", "jaxlib", "flax", "optax", "equinox", "haiku", "chex", "orbax", "numpy", "ml_dtypes", "opt_einsum",
    "penzai", "treescope", "IPython", "ipykernel", "xlakit", "jax_plugins", "jaxtyping", "typeguard",
})

_XLAKIT_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SITE_RE = re.compile(r"[\\/](site|dist)-packages[\\/]([^\\/]+)")
_CELL_RE = re.compile(r"ipykernel_\d+[\\/]\d+\.py$")


@dataclasses.dataclass(frozen=True)
class Frame:
    """One source location: ``file`` as recorded (a path, ``<stdin>``, an ipykernel cell file), 1-based
    ``line`` (0 = unknown), ``function`` name (``""`` = unknown) and 1-based ``column`` (0 = unknown)."""

    file: str
    line: int = 0
    function: str = ""
    column: int = 0

    @property
    def is_library(self) -> bool:
        return is_library_file(self.file)

    def __str__(self) -> str:
        return describe(self)


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    dirs = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib")}
    return tuple(sorted(os.path.abspath(d) + os.sep for d in dirs if d))


@functools.lru_cache(maxsize=4096)
def library_package(path: str) -> str | None:
    """The library a file belongs to (``"jax"``, ``"flax"``, ``"python"`` for the standard library), or None
    for user code. See the module docstring for the rule."""
    if not path:
        return None
    if path.startswith("<frozen"):
        return "python"
    if path.startswith("<"):
        return None  # <stdin>, <string>, <ipython-input-…>: typed by the user
    m = _SITE_RE.search(path)
    if m:
        return m.group(2).split(".")[0].split("-")[0]
    full = os.path.abspath(path)
    if full.startswith(_XLAKIT_DIR):
        return "xlakit"
    if any(full.startswith(d) for d in _stdlib_dirs()):
        return "python"
    parts = full.replace("\\", "/").split("/")
    for part in parts[:-1]:
        if part in LIBRARY_PACKAGES:
            return part
    return None


def is_library_file(path: str) -> bool:
    """True when ``path`` is library code (installed packages, the standard library, xlakit itself)."""
    return library_package(path) is not None


def first_user_frame(frames: Iterable[Frame]) -> Frame | None:
    """The first frame of user code in ``frames`` (innermost first, as XLA's stack frame chain and
    ``traceback.extract_stack()[::-1]`` give them), or None when every frame is library code."""
    for frame in frames:
        if not is_library_file(frame.file):
            return frame
    return None


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` written directly in the caller, so that the warning names
    the first frame of user code (the line that called into xlakit or JAX), not xlakit's or JAX's insides."""
    frame: types.FrameType | None = sys._getframe(1)  # the function about to call warnings.warn
    level = 1
    while frame is not None and is_library_file(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 2


def _cell_number(path: str) -> int | None:
    """The execution count of the IPython cell compiled under ``path``, when IPython is running in this
    process and still remembers it (``get_ipython().compile._filename_map``, IPython ≥ 8); else None."""
    ipython_mod = sys.modules.get("IPython")
    if ipython_mod is None:
        return None
    try:
        shell = ipython_mod.get_ipython()
        mapping = getattr(getattr(shell, "compile", None), "_filename_map", None) or {}
        number = mapping.get(path)
    except Exception:  # an IPython without the mapping, or a shell mid-teardown: no cell name, never an error
        return None
    return int(number) if isinstance(number, int) else None


def display_file(path: str) -> str:
    """A short readable name for a source file: ``cell [7]`` for a notebook cell this kernel ran
    (``cell [?]`` for one it no longer knows), a path relative to the working folder when inside it, the
    part after ``site-packages/`` for an installed library, else the path as recorded."""
    if not path:
        return "unknown"
    number = _cell_number(path)
    if number is not None:
        return f"cell [{number}]"
    if _CELL_RE.search(path) or path.startswith("<ipython-input-"):
        return "cell [?]"
    m = _SITE_RE.search(path)
    if m:
        return path[m.start(2):]
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return rel if not rel.startswith("..") else path


def describe(frame: Frame | None) -> str:
    """``cell [7], line 3 (MLP.__call__)`` / ``model.py:42 (loss)``; ``unknown`` for None."""
    if frame is None:
        return "unknown"
    name = display_file(frame.file)
    where = f"{name}, line {frame.line}" if name.startswith("cell [") else (
        f"{name}:{frame.line}" if frame.line else name)
    return f"{where} ({frame.function})" if frame.function else where
