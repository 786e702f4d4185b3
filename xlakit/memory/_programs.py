"""Turning what a user holds — a ``Compiled``, a jitted function and its arguments, a cache entry or key, a
loaded bundle — into one ``jax.stages.Compiled`` (and the function, for argument names), compiling through an
:class:`~xlakit.cache.ExecutableCache` when one is given so that a second look compiles nothing.

Where the platform's ``memory_analysis()`` carries no buffer assignment (TPU; :mod:`xlakit._jax.platforms`), a
program given as a function or ``Lowered`` is compiled once with XLA's dump instead
(:func:`xlakit._jax.compiler_dump.compile_with_assignment`: the same executable, plus its buffer assignment), or,
when something already compiled it (an xlakit cache, JAX's memo), once more with the dump — at most one extra
compile, none when this process already holds that program's dump."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["resolve_program", "with_assignment", "lower"]


def _bundle_program(bundle: Any, batch: Any, variant: Any) -> Any:
    programs = bundle.programs
    if not programs:
        raise ValueError("this bundle has no loaded programs (wait() for it, or check bundle.errors)")
    keys = [k for k in programs if variant is None or k[0] == variant]
    if batch is not None:
        keys = [k for k in keys if k[1] == batch]
    if len(keys) != 1:
        shown = sorted(programs)
        raise ValueError(f"name one bundle program with batch=<size> (and variant= when there are several); "
                         f"loaded programs (variant, batch): {shown}")
    return programs[keys[0]]


def _needs_arguments(fn: Any) -> bool:
    """Whether ``fn`` cannot be called without arguments (``jax.jit(lambda: model.init(...))`` can); a
    function whose signature Python cannot read is given the benefit of the doubt (JAX then says)."""
    import inspect

    try:
        inspect.signature(fn).bind()
    except TypeError:
        return True
    except ValueError:  # no signature to read (a builtin, some C wrappers)
        return False
    return False


def resolve_program(x: Any, args: tuple, kwargs: dict, cache: Any = None) -> tuple[Any, Any]:
    """``(jax.stages.Compiled, function or None)``: the function is the one given, or the ``nnx.jit`` function a
    flax.nnx Compiled / Lowered was made by.

    ``x`` is a ``jax.stages.Compiled`` (no arguments), a ``Lowered``, a jitted or plain function followed by
    example arguments (arrays or ``jax.ShapeDtypeStruct``; compiled through ``cache.compile`` when ``cache``
    is given, else ``jax.jit(...).lower(...).compile()``; none for a function that takes none), a cache entry
    (``EntryInfo``, a key string or an ``entries()`` row; needs ``cache``), or a ``LoadedBundle`` (``batch=`` /
    ``variant=`` in ``kwargs`` pick the program).

    Raises:
      TypeError: a function that takes arguments given none, a cache entry without ``cache=``, or anything else.
      ValueError: a bundle whose program cannot be picked.
    """
    import jax

    from xlakit._jax.stages import jax_stage, nnx_jit_function

    # flax.nnx's Compiled / Lowered hold JAX's, and the nnx.jit function that made them: its signature names the
    # arguments (``model['blocks'][0]...``, not ``args[0]...``)
    made_by = nnx_jit_function(x)
    x = jax_stage(x)
    if hasattr(x, "programs") and hasattr(x, "batch_sizes") and not callable(getattr(x, "lower", None)):
        if args:
            raise TypeError("a bundle takes no example arguments; pick its program with batch=<size>")
        return _bundle_program(x, kwargs.pop("batch", None), kwargs.pop("variant", None)), None
    if type(x).__name__ == "Series" and "key" in getattr(x, "index", ()):  # a row of cache.entries()
        x = x["key"]
    is_entry = isinstance(x, str) or (isinstance(x, Mapping) and "key" in x) or (
        hasattr(x, "header") and hasattr(x, "key"))
    if is_entry:
        if cache is None:
            raise TypeError("a cache entry names a stored program; pass the cache that holds it: "
                            "attribute(entry, cache=cache)")
        return cache.load(x), None
    if isinstance(x, jax.stages.Compiled):
        if args or kwargs:
            raise TypeError("pass example arguments only with a function; a compiled program already has them")
        from xlakit._jax import lowerings

        return with_assignment(x, lambda: lowerings.lowering_of(x)), made_by
    if isinstance(x, jax.stages.Lowered):
        if args or kwargs:
            raise TypeError("pass example arguments only with a function; a lowered program already has them")
        return with_assignment(None, x), made_by
    if not callable(x):
        raise TypeError(f"expected a jax.stages.Compiled, a function with example arguments, a cache entry or a "
                        f"loaded bundle; got {type(x).__name__}")
    if not args and not kwargs and _needs_arguments(x):
        raise TypeError(f"got the function {getattr(x, '__name__', x)!r} without example arguments; pass them "
                        "after it (arrays or jax.ShapeDtypeStruct), e.g. peak(step, params, x)")
    lowered = lower(x, args, kwargs)  # every keyword is the function's, devices= too (compile's own option)
    if cache is not None:
        compiled, _decision = cache.compile(lowered)
        return with_assignment(compiled, lowered), x
    return with_assignment(None, lowered), x


def lower(fn: Any, args: tuple, kwargs: dict) -> Any:
    """``jax.jit(fn).lower(*args, **kwargs)`` (``fn`` itself when already jitted) as JAX's ``Lowered``."""
    import jax

    from xlakit._jax import extents
    from xlakit._jax.stages import jax_stage

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    return jax_stage(extents.lower(jitted, args, kwargs, own=True))  # a look at the program, not a user's call


def _has_assignment(compiled: Any) -> bool:
    from xlakit.memory._analysis import memory_analysis

    try:
        return bool(memory_analysis(compiled).serialized_buffer_assignment_proto)
    except Exception:  # noqa: BLE001 - no analysis: the dump is the only source
        return False


def _capturing(platform: str | None) -> bool:
    """Whether a compile for ``platform`` here goes through an xlakit cache that captures XLA's dump on a miss."""
    from xlakit._jax import dump_memo, hooks

    return dump_memo.capture_enabled(platform) and hooks.installed() and hooks.current_handler() is not None


def with_assignment(compiled: Any, lowered: Any) -> Any:
    """A ``jax.stages.Compiled`` whose buffer assignment :func:`xlakit.memory.buffer_assignment` can read.

    ``compiled``: the program if already compiled (None: compile ``lowered`` here). ``lowered``: its ``Lowered``,
    or a zero-argument callable making it, or None. Returns ``compiled`` when ``memory_analysis()`` carries the
    assignment or this process holds its dump; else the executable compiled from ``lowered`` with XLA's dump (the
    same program: equal fingerprints, measured on TPU and CPU). Without ``lowered`` ``compiled`` is returned as is
    (``buffer_assignment`` then says what to pass).
    """
    from xlakit._jax import compiler_dump, lowerings, platforms
    from xlakit._jax.stages import jax_stage

    if compiled is not None and (_has_assignment(compiled) or compiler_dump.remembered(compiled=compiled)):
        return compiled
    # the compiler_options the program was compiled with, where xlakit saw its Lowered.compile(): a compile of its
    # Lowered without them is another program (its dump would describe that one)
    options = lowerings.options_of(compiled) if compiled is not None else None
    if callable(lowered) and not hasattr(lowered, "compile"):
        lowered = lowered()
    if lowered is None:
        return compiled
    kept = compiler_dump.remembered(lowered=lowered, options=options) if compiled is not None else None
    if kept is not None:  # the same program dumped before (a load can give the executable another fingerprint)
        compiler_dump.remember(kept, compiler_dump._fingerprint(compiled))
        return compiled
    if compiled is None:
        # where an enabled xlakit cache compiles a miss with XLA's dump (dump_memo.begin_capture) the plain
        # compile may carry it already: a load from the cache does not, and the dump compile follows
        platform = compiler_dump.platform_of(lowered)
        if platforms.rules(platform).assignment_in_memory_analysis \
                or compiler_dump.remembered(lowered=lowered, options=options) is not None or _capturing(platform):
            compiled = jax_stage(lowered.compile())
            if _has_assignment(compiled) or compiler_dump.remembered(compiled=compiled):
                return compiled
    name = None
    try:
        name = compiled.runtime_executable().hlo_modules()[0].name if compiled is not None else None
    except Exception:  # noqa: BLE001 - the largest dump file is then taken
        pass
    dumped = compiler_dump.compile_with_assignment(lowered, name, options)
    if compiled is not None:  # asked again for this very executable: found by its own fingerprint
        compiler_dump.remember(dumped[1], compiler_dump._fingerprint(compiled))
    return dumped[0]
