"""Explain a lookup against a store: the entry of the same function whose parts differ least, and how.

Ranking of candidate entries (same module name, any partition), nearest first:

1. signature distance: 0 when every argument has the same shape, dtype, sharding and donation; else per argument
   1000 for a different rank or dtype, 1 per differing dimension, 1 for a differing sharding or donation (so an
   ``8x5`` input's nearest is ``8x4``, not ``16x4``); a different argument count counts 10**6;
2. the number of differing parts (:func:`xlakit.explain.compare`);
3. the newest entry.

Module text is read only from the chosen entry, only after its envelope is authenticated (a full
``store.get``), and decompressed to a bounded size (:func:`xlakit.cache.entry.unpack_text`). Headers of other
entries are compared as they are listed and never decompressed.
"""

from __future__ import annotations

import re
from typing import Any

from xlakit.cache import entry as _entry
from xlakit.explain import Explanation, compare

__all__ = ["explain_lowered", "lower_program", "signature_distance"]

_DIM = re.compile(r"\?|\d+")


def _dims(shape: Any) -> list[str] | None:
    if not isinstance(shape, str):
        return None
    return [] if shape == "scalar" else shape.split("x")


def signature_distance(now: list | None, entry: list | None) -> int:
    """How far an entry's argument signature is from the lookup's (see the module docstring)."""
    if not isinstance(now, list) or not isinstance(entry, list):
        return 0 if now == entry else 10**6
    if len(now) != len(entry):
        return 10**6
    total = 0
    for a, b in zip(now, entry, strict=True):
        if not isinstance(a, dict) or not isinstance(b, dict):
            total += 1000
            continue
        da, db = _dims(a.get("shape")), _dims(b.get("shape"))
        if da is None or db is None or len(da) != len(db) or a.get("dtype") != b.get("dtype"):
            total += 1000 if a.get("shape") != b.get("shape") or a.get("dtype") != b.get("dtype") else 0
        else:
            total += sum(x != y for x, y in zip(da, db, strict=True))
        total += (a.get("sharding") != b.get("sharding")) + (a.get("donation") != b.get("donation"))
    return total


def lower_program(x: Any, /, *args: Any, **kwargs: Any):
    """``x`` as a ``jax.stages.Lowered``: a Lowered as is, a ``jax.jit`` object or a plain function (jitted here)
    lowered with the example arguments (``x`` positional only: every keyword is the function's).

    Raises:
      TypeError: example arguments with a Lowered, ``x`` is a ``jax.stages.Compiled`` (already compiled: it
        cannot go through a cache), or ``x`` is not callable.
    """
    import jax

    from xlakit._jax.stages import jax_stage

    if isinstance(x, (str, bytes, bytearray)):  # str.lower made "f" look like a jax.jit object
        raise TypeError(f"expected a jax.stages.Lowered, a jax.jit object or a function, got {type(x).__name__} "
                        f"{x!r:.40}; pass the function itself, not its name")
    x = jax_stage(x)  # flax.nnx's Lowered / Compiled hold JAX's
    if isinstance(x, jax.stages.Compiled):
        # A Compiled is callable, so JAX would try to trace it and fail with a tracer error.
        raise TypeError("got a jax.stages.Compiled, which is already compiled and cannot go through the cache; "
                        "pass the function or its jax.jit followed by example arguments (cache.compile(f, x)), "
                        "or a Lowered (cache.compile(jax.jit(f).lower(x))); to reuse a stored program, "
                        "use cache.load(key)")
    if isinstance(x, jax.stages.Lowered):
        if args or kwargs:
            raise TypeError("a Lowered program takes no example arguments; pass the jitted function instead")
        return x
    if not hasattr(x, "lower"):
        if not callable(x):
            raise TypeError(f"expected a jax.stages.Lowered, a jax.jit object or a function, got {type(x)}")
        x = jax.jit(x)
    from xlakit._jax import extents

    return jax_stage(extents.lower(x, args, kwargs))


def _parameter_paths(lowered: Any, fn: Any) -> list[str] | None:
    """The argument path (``z``, ``params['w']``) of each ``@main`` argument of ``lowered``, in order: JAX keeps
    only the leaves the program uses (``Lowered._lowering.compile_args["kept_var_idx"]``, checked on jax 0.10.2);
    None when that record or the argument tree is unavailable."""
    import types

    from xlakit._jax.arguments import argument_leaves

    try:
        kept = lowered._lowering.compile_args.get("kept_var_idx")
        tree = lowered.in_tree
    except Exception:  # noqa: BLE001 - another JAX keeps them elsewhere: positions only
        return None
    if kept is None:
        return None
    view = types.SimpleNamespace(in_tree=tree, _executable=types.SimpleNamespace(_kept_var_idx=kept))
    try:
        leaves = argument_leaves(view, fn if callable(fn) else None)
    except Exception:  # noqa: BLE001 - an explanation never fails for want of names
        return None
    if any(p not in leaves for p in range(len(kept))):
        return None
    return [leaves[p].path for p in range(len(kept))]


def explain_lowered(store: Any, lowered: Any, fn: Any = None) -> Explanation:
    """The :class:`~xlakit.explain.Explanation` of a lookup of ``lowered`` in ``store`` (hooks must be installed);
    ``fn``: the function it was lowered from, to name arguments by its parameter names.

    Raises:
      RuntimeError: JAX computed no key (its compilation cache is disabled).
    """
    from xlakit._jax.environment import current_environment, expectations
    from xlakit._jax.fresh import probe_key
    from xlakit._jax.signature import main_signature, module_text

    ctx, backend = probe_key(lowered)
    env = current_environment(backend.platform)
    partition = env.partition_name()
    text = module_text(ctx.module)
    signature = main_signature(text)
    now: dict[str, Any] = {"key_parts": ctx.parts(), "environment": env.to_dict(), "signature": signature,
                           "module_text": text, "paths": _parameter_paths(lowered, fn)}
    expected = expectations(env)
    best = None
    for info in store.entries():  # headers only: explaining loads nothing
        if info.name != ctx.module_name or info.key.endswith(_entry.LEGACY_SUFFIX):
            continue
        header = dict(info.header)
        env_field = header.get("environment")
        recorded: dict[str, Any] = env_field if isinstance(env_field, dict) else {}
        if (info.key == ctx.key and info.partition == partition
                and all(recorded.get(k) == v for k, v in expected.items())):
            unrunnable = _entry.unrunnable_reason(header, env, callbacks=True)
            if unrunnable is not None:  # the entry is there, but a lookup will compile: say so now
                return Explanation(ctx.module_name, ctx.key, partition, "unrunnable",
                                   reason=f"{unrunnable}; a lookup compiles instead (the entry is kept)")
            return Explanation(ctx.module_name, ctx.key, partition, "hit")
        header.pop("module_text", None)
        diffs, _ = compare(now, header)
        created = info.created if isinstance(info.created, (int, float)) else 0.0
        rank = (signature_distance(signature, header.get("signature")), len(diffs), -created)
        if best is None or rank < best[0]:
            best = (rank, info, header, diffs)
    if best is None:
        return Explanation(ctx.module_name, ctx.key, partition, "new")
    _, info, header, diffs = best
    module_diff = None
    if any(d.kind == "module" for d in diffs):
        header["module_text"] = _authenticated_text(store, info)
        diffs, module_diff = compare(now, header)
    return Explanation(ctx.module_name, ctx.key, partition, "miss",
                       nearest={"key": info.key, "partition": info.partition, "created": info.created},
                       differences=tuple(diffs), module_diff=module_diff)


def _authenticated_text(store: Any, info: Any) -> str | None:
    """The entry's module text, only from a header whose envelope passed the store's SHA-256 and HMAC checks."""
    try:
        found = store.get(info.partition, info.key)
    except Exception:  # noqa: BLE001 - an explanation never fails for want of a diff
        return None
    if getattr(found, "status", None) != "hit" or not isinstance(found.header, dict):
        return None
    return _entry.unpack_text(found.header.get("module_text_zstd"))
