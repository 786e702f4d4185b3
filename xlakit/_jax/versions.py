"""Which JAX versions xlakit's private-API hooks support, and the check that guards them.

xlakit's hooks (:mod:`xlakit._jax.hooks`) replace four private JAX functions: ``jax._src.compiler._cache_read``
and ``_cache_write``, ``jax._src.cache_key.get`` and ``jax._src.pjit._run_python_pjit``. Each one's signature is
checked, not only the version string, so a JAX that renamed or reshaped any of them is refused with a clear
error instead of failing inside a compile. :func:`check_memo_bypass` guards the private names that
:mod:`xlakit._jax.fresh` uses.
"""

from __future__ import annotations

import inspect
import re

__all__ = ["MIN_JAX", "MAX_JAX_EXCLUSIVE", "SUPPORTED_RANGE", "UnsupportedJaxVersion", "check_transparent_hooks",
           "read_hook_takes_host_callbacks", "parse_version"]

MIN_JAX = (0, 9, 0)
MAX_JAX_EXCLUSIVE = (0, 13, 0)
SUPPORTED_RANGE = ">=0.9.0,<0.13 (tested: 0.10.2 on Python 3.11, 0.12.x on Python 3.12)"

# Two generations of the hooks: up to 0.10 the write side receives the host callbacks (and refuses to store
# programs that have them); from 0.11 the read side receives them, so such programs can be stored and rebound.
_READ_PARAMS = (["module_name", "cache_key", "compile_options", "backend", "executable_devices"],
                ["module_name", "cache_key", "compile_options", "backend", "executable_devices", "host_callbacks"])
_WRITE_PARAMS = (["cache_key", "compile_time_secs", "module_name", "backend", "executable", "host_callbacks"],
                 ["cache_key", "compile_time_secs", "module_name", "backend", "executable"])
# cache_key.get(module, devices, compile_options, backend, ...): xlakit reads the first two, passes the rest on.
_KEY_GET_PREFIX = ["module", "devices", "compile_options", "backend"]
_RUN_PYTHON_PJIT_PARAMS = (["p", "args_flat", "fun", "args", "kwargs"],)


class UnsupportedJaxVersion(RuntimeError):
    """The installed JAX lacks the private hooks xlakit's cache needs (transparent mode and ExecutableCache
    both use them). Public name: ``xlakit.UnsupportedJaxVersion``."""


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.10.2"`` -> ``(0, 10, 2)``; suffixes such as ``.dev20260101`` or ``rc1`` are ignored."""
    numbers = [int(n) for n in re.findall(r"\d+", text)[:3]]
    return tuple(numbers + [0] * (3 - len(numbers)))  # type: ignore[return-value]


def read_hook_takes_host_callbacks() -> bool:
    """True when ``jax._src.compiler._cache_read`` receives host callbacks (JAX >= 0.11)."""
    from jax._src import compiler

    return "host_callbacks" in inspect.signature(compiler._cache_read).parameters  # follows __wrapped__


def _params(fn) -> list[str]:
    return list(inspect.signature(getattr(fn, "__wrapped__", fn)).parameters)


def check_transparent_hooks() -> None:
    """Raise :class:`UnsupportedJaxVersion` unless this JAX has every function xlakit's hooks replace.

    Checked: the version range; ``jax._src.compiler._cache_read`` / ``_cache_write`` (either generation);
    ``jax._src.cache_key.get`` (its first four parameters); ``jax._src.pjit._run_python_pjit``.

    Raises:
      UnsupportedJaxVersion: naming the installed version, each changed function and the supported range.
    """
    import jax

    version = parse_version(jax.__version__)
    problems = []
    if not (MIN_JAX <= version < MAX_JAX_EXCLUSIVE):
        problems.append(f"version {jax.__version__} is outside the supported range")
    try:
        from jax._src import cache_key, compiler, pjit
    except ImportError as exc:  # pragma: no cover - a JAX without these modules
        problems.append(f"a private JAX module is missing ({exc})")
    else:
        for module, name, expected, prefix in (
                (compiler, "_cache_read", _READ_PARAMS, False), (compiler, "_cache_write", _WRITE_PARAMS, False),
                (cache_key, "get", (_KEY_GET_PREFIX,), True),
                (pjit, "_run_python_pjit", _RUN_PYTHON_PJIT_PARAMS, False)):
            where = f"{module.__name__}.{name}"
            fn = getattr(module, name, None)
            if fn is None:
                problems.append(f"{where} is missing")
                continue
            params = _params(fn)
            ok = any(params[: len(e)] == e for e in expected) if prefix else params in [list(e) for e in expected]
            if not ok:
                problems.append(f"{where}{tuple(params)} has changed (expected "
                                f"{' or '.join(str(tuple(e)) for e in expected)}{' first' if prefix else ''})")
    if problems:
        raise UnsupportedJaxVersion(
            "xlakit's cache cannot hook this JAX: " + "; ".join(problems)
            + f". Supported jax versions: {SUPPORTED_RANGE}. Install one of them; until then JAX's own "
            "persistent cache (jax_compilation_cache_dir) still works, and xlakit's bundles, memory tools and "
            "events need no hooks.")
