"""Which positional arguments a jitted function takes as static (``static_argnums``, and the positions of its
``static_argnames``): JAX's ``PjitFunction`` records both, positions resolved against the signature, in its
private ``_jit_info`` (checked on jax 0.10.2); flax.nnx's ``JitWrapped`` keeps ``static_argnums`` itself."""

from __future__ import annotations

from typing import Any

__all__ = ["static_positions"]


def static_positions(fn: Any, count: int) -> frozenset[int]:
    """Positions (``0 <= p < count``, a negative ``static_argnums`` counted from ``count``) of ``fn``'s static
    positional arguments when it is called with ``count`` of them; empty for a plain function or a wrapper
    that does not say."""
    info = getattr(fn, "_jit_info", None)
    nums: Any = getattr(info, "static_argnums", None) if info is not None else getattr(fn, "static_argnums", None)
    if isinstance(nums, int) and not isinstance(nums, bool):
        nums = (nums,)
    try:
        positions = [int(n) for n in nums or ()]
    except (TypeError, ValueError):  # an attribute of that name that is not a list of positions
        return frozenset()
    return frozenset(p % count for p in positions if -count <= p < count)
