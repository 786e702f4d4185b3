"""Where a piece of a program came from, in the user's terms: the first frame of *user* code, and a notebook
cell's name instead of ipykernel's temporary file.

Shared by memory attribution (frames decoded from an HloModuleProto's stack frame index) and the event
timeline (the Python stack at the moment a program is traced or compiled), so both draw the line between
"your code" and "library code" in the same place. Pure Python: no JAX import, nothing run at import.

A file is *library* code when it lies where an installed distribution or Python itself really is — decided by
locations, never by what a folder is called (a user's package with a folder named ``jax/`` is user code):
- under an installer's package directory: this interpreter's ``site-packages`` (``sysconfig`` purelib /
  platlib, ``site.getsitepackages()``, the user site), or any path whose ``site-packages`` / ``dist-packages``
  directory is the installers' (a path recorded by another environment, e.g. in a cached program);
- Python's own standard library (``sysconfig`` ``stdlib`` / ``platstdlib``) and ``<frozen …>`` modules;
- xlakit's own package folder (also in a source checkout, where it is not under site-packages);
- the folder a package of :data:`LIBRARY_PACKAGES` is really imported from (its module's ``__path__``, or
  where ``importlib.util.find_spec`` finds it): an editable jax or flax checkout.
Everything else — a script, a test file, a notebook cell, ``<stdin>``, the user's own packages — is *user* code.
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

#: Top-level packages whose frames are never "the user's line", even from a source checkout (found where this
#: process imports them from, not by the name of a folder).
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


def _folders(paths: Iterable[str | None]) -> tuple[str, ...]:
    """Each path as an absolute folder prefix ending in the separator, also resolved through symlinks."""
    out = set()
    for p in paths:
        if p:
            out |= {os.path.abspath(p) + os.sep, os.path.realpath(p) + os.sep}
    return tuple(sorted(out, key=len, reverse=True))  # the innermost root first (a venv inside a prefix)


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    return _folders(sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib"))


@functools.cache
def _site_dirs() -> tuple[str, ...]:
    """This interpreter's installation directories for packages (``site-packages`` by any name)."""
    import site

    paths = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
    try:
        paths += [*site.getsitepackages(), site.getusersitepackages()]
    except AttributeError:  # a virtualenv's old site.py without them
        pass
    return _folders(paths)


def _package_dirs(name: str) -> tuple[str, ...]:
    """The folders top-level package ``name`` is imported from in this process (its ``__path__``; where
    ``importlib.util.find_spec`` would find it when not imported yet); () when it is not installed."""
    module = sys.modules.get(name)
    paths = list(getattr(module, "__path__", None) or ()) if module is not None else []
    if module is None:
        import importlib.util

        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        paths = list(spec.submodule_search_locations or ()) if spec is not None else []
    return _folders(paths)


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
    site = next((d for d in _site_dirs() if full.startswith(d)), None)
    if site is not None:
        return full[len(site):].replace("\\", "/").split("/", 1)[0].split(".")[0].split("-")[0]
    if any(full.startswith(d) for d in _stdlib_dirs()):
        return "python"
    parts = full.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part in LIBRARY_PACKAGES and "/".join(parts[:i + 1]) + "/" in (
                d.replace("\\", "/") for d in _package_dirs(part)):
            return part  # the folder this process imports the library from (an editable checkout)
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
