"""Where a piece of a program came from, in the user's terms: the first frame of *user* code, and a notebook
cell's name instead of ipykernel's temporary file.

Shared by memory attribution (frames decoded from an HloModuleProto's stack frame index) and the event
timeline (the Python stack at the moment a program is traced or compiled), so both draw the line between
"your code" and "library code" in the same place. Pure Python: no JAX import, nothing run at import.

A file is *library* code only when it is provably part of an installed distribution or of Python itself —
decided by where the file really is (symlinks resolved), never by what a folder is called nor by what
``importlib`` would import under a name (a user's ``jax/``, ``equinox/`` or ``site-packages/`` folder is user
code):
- inside this interpreter's install locations: ``sysconfig`` purelib / platlib / stdlib / platstdlib (also of
  ``sys.base_prefix``), ``site.getsitepackages()`` and the user site; ``<frozen …>`` modules;
- xlakit's own package folder (this module's, also in a source checkout), except the demo's example models
  (``xlakit/demo/workloads.py``): they stand for the user's model in the demo and the notebooks, so their lines
  are the ones memory is charged to (charged to "no line of your code" they explained nothing);
- listed in the ``RECORD`` (``installed-files.txt`` for a legacy egg) of a distribution installed beside it
  (``pip install --target DIR``, another environment on this machine), or, for the scripts and data an installer
  writes outside site-packages (``../../../bin/tool``), of one installed in this interpreter;
- a path that does not exist here (recorded by another environment, e.g. in a program compiled elsewhere) whose
  part after its ``site-packages`` / ``dist-packages`` folder is a file installed in this interpreter's
  site-packages: the same installed file.
An editable install's sources (``pip install -e``) are *user* code: its RECORD lists only what the installer
wrote (a ``.pth``, scripts), not the source folder — that is the code its owner is working on. Everything else
— a script, a test file, a notebook cell, ``<stdin>``, the user's own packages, a checkout put on ``sys.path`` —
is *user* code.
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

__all__ = ["Frame", "is_library_file", "library_package", "first_user_frame", "display_file", "describe",
           "user_stacklevel"]

_XLAKIT_DIR = os.path.normcase(os.path.dirname(os.path.realpath(__file__))) + os.sep
_EXAMPLE_MODELS = os.path.join(_XLAKIT_DIR, "demo", "workloads.py")  # user code by role (module docstring)
# Only to read a path recorded elsewhere: where its installer folder ends (the verdict needs the file here).
_INSTALLER_DIR_RE = re.compile(r"[\\/](?:site|dist)-packages[\\/]")
_CELL_RE = re.compile(r"ipykernel_\d+[\\/]\d+\.py$")
_OLD_CELL_RE = re.compile(r"<ipython-input-(\d+)-[0-9a-f]+>$")


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


def _real(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


def _folders(paths: Iterable[str | None]) -> tuple[str, ...]:
    """Each existing path resolved through symlinks, as a folder prefix ending in the separator."""
    out = {_real(p) + os.sep for p in paths if p and os.path.isdir(p)}
    return tuple(sorted(out, key=len, reverse=True))  # the innermost root first (site-packages inside stdlib)


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    return _folders(paths.get(k) for paths in (sysconfig.get_paths(), sysconfig.get_paths(vars=base))
                    for k in ("stdlib", "platstdlib"))


@functools.cache
def _site_dirs() -> tuple[str, ...]:
    """This interpreter's installation directories for packages (``site-packages`` by any name)."""
    import site

    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    paths = [p.get(k) for p in (sysconfig.get_paths(), sysconfig.get_paths(vars=base)) for k in ("purelib", "platlib")]
    try:
        paths += [*site.getsitepackages(), site.getusersitepackages()]
    except AttributeError:  # a virtualenv's old site.py without them
        pass
    return _folders(paths)


@functools.cache
def _prefixes() -> tuple[str, ...]:
    """Where an installer writes outside site-packages (scripts, data): this interpreter's prefixes."""
    import site

    return _folders([sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
                     getattr(site, "USER_BASE", None)])


def _top_name(relative: str) -> str:
    """``jax`` for ``jax/_src/api.py``, ``six`` for ``six.py``, ``_cffi_backend`` for its ``.cpython-….so``."""
    return relative.replace("\\", "/").split("/", 1)[0].split(".")[0].split("-")[0]


@functools.lru_cache(maxsize=1024)
def _metadata_dirs(folder: str) -> tuple[str, ...]:
    """The ``*.dist-info`` / ``*.egg-info`` folders directly in ``folder`` (a distribution installed there)."""
    try:
        with os.scandir(folder) as entries:
            return tuple(e.path for e in entries if e.name.endswith((".dist-info", ".egg-info")) and e.is_dir())
    except OSError:
        return ()


@functools.lru_cache(maxsize=1024)
def _recorded(meta: str) -> frozenset[str]:
    """The files a distribution's installer wrote, as absolute normalized paths: its ``RECORD`` (relative to the folder
    holding the ``.dist-info``) or a legacy egg's ``installed-files.txt`` (relative to the ``.egg-info``).
    Not ``SOURCES.txt``: an ``.egg-info`` inside a project's own checkout (``setup.py develop``) lists the
    user's sources, which no installer copied anywhere."""
    import csv

    if meta.endswith(".dist-info"):
        listing, root = os.path.join(meta, "RECORD"), os.path.dirname(meta)
    else:
        listing, root = os.path.join(meta, "installed-files.txt"), meta
    try:
        with open(listing, encoding="utf-8", newline="") as f:
            rows = [row[0] for row in csv.reader(f) if row and row[0]]
    except (OSError, UnicodeDecodeError, csv.Error):
        return frozenset()
    return frozenset(os.path.normcase(os.path.normpath(os.path.join(root, r))) for r in rows)


@functools.cache
def _written_outside_site() -> dict[str, str]:
    """Absolute normalized path -> distribution name of what the distributions installed in this interpreter
    wrote outside their site-packages (``../../../bin/tool``: console scripts, data). Read once, and only when a
    file under this interpreter's prefixes but outside its package folders asks; only those lines are parsed."""
    import csv

    out: dict[str, str] = {}
    for site_dir in _site_dirs():
        for meta in _metadata_dirs(site_dir.rstrip(os.sep)):
            try:
                with open(os.path.join(meta, "RECORD"), encoding="utf-8", newline="") as f:
                    lines = [line for line in f if line.startswith(("..", "/", '"'))]
            except (OSError, UnicodeDecodeError):
                continue
            name = _top_name(os.path.basename(meta))
            for row in csv.reader(lines):
                if row and row[0]:
                    out.setdefault(os.path.normcase(os.path.normpath(os.path.join(site_dir, row[0]))), name)
    return out


def _installed(real: str) -> tuple[str | None, int] | None:
    """``(distribution name or None, where the part inside its install folder starts)`` for the existing file
    ``real`` (resolved, normcased) when a distribution's record lists it; else None."""
    folder = os.path.dirname(real)
    while True:
        for meta in _metadata_dirs(folder):
            if real in _recorded(meta):
                return None, len(folder) + 1
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if any(real.startswith(p) for p in _prefixes()):
        name = _written_outside_site().get(real)  # a console script: named by its distribution
        if name is not None:
            return name, len(os.path.dirname(real)) + 1
    return None


@functools.lru_cache(maxsize=4096)
def _locate(path: str) -> tuple[str, str | None] | None:
    """``(package, the file's path inside its install folder or None)`` for library code, None for user code.
    Memoized per path: this runs for every frame of every stack attributed."""
    if not path:
        return None
    if path.startswith("<frozen"):
        return "python", None
    if path.startswith("<"):
        return None  # <stdin>, <string>, <ipython-input-…>: typed by the user
    resolved = os.path.realpath(path)
    real = os.path.normcase(resolved)  # same length: only case and separators change
    if real.startswith(_XLAKIT_DIR):
        return None if real == _EXAMPLE_MODELS else ("xlakit", None)
    site = next((d for d in _site_dirs() if real.startswith(d)), None)
    if site is not None and _present(real):  # code exec'd under a made-up name there is the user's
        return _top_name(resolved[len(site):]), resolved[len(site):]
    if any(real.startswith(d) for d in _stdlib_dirs()) and _present(real):
        return "python", None
    if os.path.exists(real):
        found = _installed(real)
        if found is None:
            return None
        return found[0] or _top_name(resolved[found[1]:]), resolved[found[1]:]
    # Recorded by another environment: the same file only if this interpreter installed it at the same place.
    marks = list(_INSTALLER_DIR_RE.finditer(path))
    inside = path[marks[-1].end():] if marks else ""
    parts = re.split(r"[\\/]", inside)  # recorded on Windows or POSIX alike
    if inside and any(os.path.isfile(os.path.join(d, *parts)) for d in _site_dirs()):
        return _top_name(inside), inside
    return None


def _present(real: str) -> bool:
    """Whether the file exists, or sits inside an archive that does (a zipped egg, ``python311.zip``)."""
    head = real
    while True:
        if os.path.exists(head):
            return os.path.isfile(head) or head == real
        parent = os.path.dirname(head)
        if parent == head:
            return False
        head = parent


def library_package(path: str) -> str | None:
    """The library a file belongs to (``"jax"``, ``"flax"``, ``"python"`` for the standard library), or None
    for user code. See the module docstring for the rule."""
    found = _locate(path)
    return found[0] if found is not None else None


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
    old_style = _OLD_CELL_RE.match(path)  # IPython before 8 named a cell by its execution count
    if old_style:
        return f"cell [{old_style.group(1)}]"
    if _CELL_RE.search(path) or path.startswith("<ipython-input-"):
        return "cell [?]"
    found = _locate(path)
    if found is not None and found[1] is not None:
        return found[1]
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
