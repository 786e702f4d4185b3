"""Which JAX versions xlakit's private-API hooks support, and the check that guards them.

The transparent cache replaces two private functions of ``jax._src.compiler`` (``_cache_read`` and
``_cache_write``). Their signatures are checked, not only the version string, so a JAX that renamed or
reshaped them is refused with a clear error instead of failing inside a compile.
"""

from __future__ import annotations

import inspect
import re

__all__ = ["MIN_JAX", "MAX_JAX_EXCLUSIVE", "SUPPORTED_RANGE", "UnsupportedJaxVersion", "check_transparent_hooks"]

MIN_JAX = (0, 9, 0)
MAX_JAX_EXCLUSIVE = (0, 13, 0)
SUPPORTED_RANGE = ">=0.9.0,<0.13 (tested: 0.10.2 on Python 3.11, 0.12.x on Python 3.12)"

# Two generations of the hooks: up to 0.10 the write side receives the host callbacks (and refuses to store
# programs that have them); from 0.11 the read side receives them, so such programs can be stored and rebound.
_READ_PARAMS = (["module_name", "cache_key", "compile_options", "backend", "executable_devices"],
                ["module_name", "cache_key", "compile_options", "backend", "executable_devices", "host_callbacks"])
_WRITE_PARAMS = (["cache_key", "compile_time_secs", "module_name", "backend", "executable", "host_callbacks"],
                 ["cache_key", "compile_time_secs", "module_name", "backend", "executable"])


class UnsupportedJaxVersion(RuntimeError):
    """The installed JAX lacks the private hooks xlakit's transparent cache needs."""


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.10.2"`` -> ``(0, 10, 2)``; suffixes such as ``.dev20260101`` or ``rc1`` are ignored."""
    numbers = [int(n) for n in re.findall(r"\d+", text)[:3]]
    return tuple(numbers + [0] * (3 - len(numbers)))  # type: ignore[return-value]


def read_hook_takes_host_callbacks() -> bool:
    """True when ``jax._src.compiler._cache_read`` receives host callbacks (JAX >= 0.11)."""
    from jax._src import compiler

    return "host_callbacks" in inspect.signature(compiler._cache_read).parameters  # follows __wrapped__


def check_transparent_hooks() -> None:
    """Raise :class:`UnsupportedJaxVersion` unless this JAX has the hooks transparent mode replaces.

    Raises:
      UnsupportedJaxVersion: naming the installed version and the supported range.
    """
    import jax
    from jax._src import compiler

    version = parse_version(jax.__version__)
    problems = []
    if not (MIN_JAX <= version < MAX_JAX_EXCLUSIVE):
        problems.append(f"version {jax.__version__} is outside the supported range")
    for name, expected in (("_cache_read", _READ_PARAMS), ("_cache_write", _WRITE_PARAMS)):
        fn = getattr(compiler, name, None)
        if fn is None:
            problems.append(f"jax._src.compiler.{name} is missing")
            continue
        params = list(inspect.signature(getattr(fn, "__wrapped__", fn)).parameters)
        if params not in expected:
            problems.append(f"jax._src.compiler.{name}{tuple(params)} has changed (expected one of "
                            f"{' or '.join(str(tuple(e)) for e in expected)})")
    if problems:
        raise UnsupportedJaxVersion(
            "xlakit's transparent cache cannot hook this JAX: " + "; ".join(problems)
            + f". Supported jax versions: {SUPPORTED_RANGE}. Install one of them, or use xlakit.ExecutableCache, "
            "which needs no private hooks.")
