"""xlakit's own keyword options beside the keyword arguments of the user's function.

The functions that take a program followed by its example arguments (``peak(step, params, x=x, cache=...)``,
``probe``, ``ExecutableCache.compile``...) take the program positionally only, so every keyword goes to the
user's function as ``jax.jit(step)(params, x=x)`` would pass it — except the few options each documents as its
own (``cache``, ``isolate``, ``devices``...). Those keep their names, and their default is :data:`DEFAULT`, so
passing one is told apart from leaving it out. Passing one whose name the user's function also takes (a
parameter of that name that the positional arguments leave unfilled) is refused (:func:`refuse_clashes`): which
of the two it was meant for cannot be known, and either guess would hand one of them a value silently. A
function that takes such a keyword only through ``**kwargs`` never gets it: the name is xlakit's (and
``cache=`` must then be an xlakit cache, so a KV cache passed there is an error, not lost).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Mapping
from typing import Any, Final, Literal

__all__ = ["DEFAULT", "Default", "refuse_clashes", "program_cache"]


class _Default(enum.Enum):
    DEFAULT = "default"

    def __repr__(self) -> str:
        return "<default>"


#: The default of an xlakit option: "not passed" (the documented default applies).
DEFAULT: Final = _Default.DEFAULT
Default = Literal[_Default.DEFAULT]


def _function(program: Any) -> Any:
    """The user's function behind ``program``, or None where it is a compiled or lowered program, a cache entry,
    a bundle, or anything else that takes no keyword arguments of its own."""
    from xlakit._jax.stages import jax_stage

    try:
        import jax

        stage = jax_stage(program)
        if isinstance(stage, (jax.stages.Compiled, jax.stages.Lowered)):
            return None
    except Exception:  # noqa: BLE001 - not a stage: judged by being callable below
        stage = program
    return stage if callable(stage) and not isinstance(stage, type) else None


def refuse_clashes(where: str, program: Any, args: tuple, options: Mapping[str, tuple[Any, str]]) -> None:
    """Raise TypeError where an option passed to ``where`` is also a keyword of the user's function.

    Args:
      where: the public function, for the message (``"peak"``).
      program: what the user passed as the program (only a function can clash).
      args: the positional example arguments (a parameter they fill cannot be meant by the keyword).
      options: name -> (the value passed, or :data:`DEFAULT`; what the option is, in words).

    Raises:
      TypeError: naming the option, the function and how to pass the function's argument instead.
    """
    given = [name for name, (value, _) in options.items() if value is not DEFAULT]
    if not given:
        return
    fn = _function(program)
    if fn is None:
        return
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature Python can read: nothing to compare with
        return
    try:
        filled = set(sig.bind_partial(*args).arguments)
    except TypeError:  # more positional arguments than it takes: JAX says so when it traces
        filled = set()
    takes = {name for name, p in sig.parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in filled}
    clashes = [name for name in given if name in takes]
    if not clashes:
        return
    name = clashes[0]
    fn_name = getattr(fn, "__name__", None) or type(fn).__name__
    raise TypeError(
        f"{where}(): {name}= is xlakit's own option here ({options[name][1]}), and {fn_name} also takes an "
        f"argument named {name!r}, so the keyword cannot say which of the two it is for. Pass {fn_name}'s "
        f"{name!r} positionally, in its place among the example arguments, or wrap the function "
        f"(lambda *a: {fn_name}(*a, {name}=value)); xlakit's {name}= then stays a keyword")


def _is_cache(value: Any) -> bool:
    """An xlakit cache (``ExecutableCache``, ``TransparentCache``): by the mark its class carries
    (``StoreHandler.xlakit_cache``; this layer imports no feature), not by shape — a user's KV cache with a
    ``load()`` method is not one."""
    return getattr(type(value), "xlakit_cache", False) is True


def program_cache(where: str, program: Any, args: tuple, cache: Any) -> Any:
    """The ``cache=`` option of ``where``: None where not passed, else an xlakit cache.

    Raises:
      TypeError: the user's function also takes ``cache`` (:func:`refuse_clashes`), or the value is no
        xlakit cache (a KV cache meant for the function, given to one that takes ``**kwargs``).
    """
    refuse_clashes(where, program, args, {"cache": (cache, "the ExecutableCache to compile through or load from")})
    if cache is DEFAULT or cache is None:
        return None
    if not _is_cache(cache):
        yours = (" An argument of your function named 'cache' goes positionally, or through a wrapper "
                 "(lambda *a: fn(*a, cache=value))." if _function(program) is not None else "")
        raise TypeError(f"{where}(): cache= is xlakit's own option, an ExecutableCache (or the cache "
                        f"xlakit.enable_cache() returned) to compile through; got {type(cache).__name__}.{yours}")
    return cache
