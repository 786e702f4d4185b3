"""Checkpointing each block of a model, without editing it: what people do with remat (``jax.checkpoint`` or
``nnx.remat`` on the layer), tried on a function that does not do it yet.

``jax.checkpoint(loss)`` around a whole function keeps only its inputs, so the backward pass recomputes
*everything* before it can start: the recomputed values are all live at once and the peak may not move (see
``Comparison.why``). Checkpointing each block keeps the blocks' inputs and recomputes one block at a time.
:func:`checkpoint_each` does that to a function as it is: while the function traces, every call of ``block``
goes through a checkpoint, and the block is restored right after.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["checkpoint_each"]

_patching = threading.RLock()  # two traces patching the same block at once would restore each other's patch


def _checkpoint(fn: Callable, policy: Any, nnx_module: bool) -> Callable:
    if nnx_module:  # a flax.nnx Module is a graph node, not a pytree: nnx.remat passes its state through
        from flax import nnx

        return nnx.remat(fn, policy=policy)
    import jax

    return jax.checkpoint(fn, policy=policy)


def _is_nnx_module(cls: type) -> bool:
    flax_nnx = sys.modules.get("flax.nnx")
    return flax_nnx is not None and issubclass(cls, flax_nnx.Module)


@contextmanager
def _patched(block: Any, policy: Any, calls: list[int]) -> Iterator[None]:
    """``block`` (a class's ``__call__``, or a module-level function by its name) checkpointed inside the
    ``with``; every call through the patch is counted in ``calls``."""
    owner: Any
    if isinstance(block, type):
        owner, name, nnx_module = block, "__call__", _is_nnx_module(block)
    else:
        owner, name, nnx_module = sys.modules.get(getattr(block, "__module__", "") or ""), block.__name__, False
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    with _patching:
        setattr(owner, name, _checkpoint(functools.wraps(original)(counted), policy, nnx_module))
        try:
            yield
        finally:
            setattr(owner, name, original)


def checkpoint_each(fn: Callable, block: Any, *, policy: str | Callable | None = None) -> Callable:
    """``fn`` with every call of ``block`` inside it checkpointed, so the backward pass recomputes one block at a
    time and keeps only the blocks' inputs (plus what ``policy`` saves).

    Args:
      fn: the function to differentiate (a loss, a forward pass); called as before.
      block: the layer to checkpoint: a class (its ``__call__`` is wrapped while ``fn`` runs: a flax.nnx
        ``Module`` class through ``nnx.remat``, any other, e.g. an equinox module, through ``jax.checkpoint``), or
        a function defined at module level that ``fn`` calls by its global name.
      policy: a ``jax.checkpoint_policies`` name (``"dots_saveable"``) or policy; None saves nothing.

    Returns:
      a function with ``fn``'s signature; jit and differentiate it as ``fn``.

    Raises:
      TypeError: ``block`` is neither a class nor a module-level function; ValueError: ``policy`` names no
      ``jax.checkpoint_policies`` member. RuntimeError (when the returned function runs): ``fn`` never called
      ``block`` through the name patched (it holds another reference to it, e.g. a closure or an alias), so
      nothing was checkpointed.
    """
    import jax

    if not isinstance(block, type):
        module = sys.modules.get(getattr(block, "__module__", "") or "")
        name = getattr(block, "__name__", "")
        if not callable(block) or module is None or getattr(module, name, None) is not block:
            raise TypeError(f"checkpoint_each(fn, block): block must be a class or a function defined at module "
                            f"level (found by its name in its module), got {block!r}")
    if isinstance(policy, str):
        if not hasattr(jax.checkpoint_policies, policy):
            raise ValueError(f"jax.checkpoint_policies has no {policy!r}")
        policy = getattr(jax.checkpoint_policies, policy)
    label = getattr(block, "__qualname__", repr(block))

    @functools.wraps(fn)
    def each(*args: Any, **kwargs: Any) -> Any:
        calls: list[int] = []
        with _patched(block, policy, calls):
            out = fn(*args, **kwargs)
        if not calls:
            raise RuntimeError(f"{getattr(fn, '__name__', 'fn')} never called {label} through the name "
                               "checkpoint_each patches (its class's __call__, or its module-level name): nothing was "
                               "checkpointed; pass the class or function the model really calls")
        return out

    each.checkpointed_block = label  # type: ignore[attr-defined]
    return each
