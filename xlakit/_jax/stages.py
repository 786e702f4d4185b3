"""JAX's own stage objects inside a library's wrappers: ``nnx.jit(f).lower(...)`` returns flax's ``Lowered``
and its ``compile()`` flax's ``Compiled`` (``flax.nnx.transforms.compilation``, flax 0.12), callables that hold
the ``jax.stages.Lowered`` / ``jax.stages.Compiled`` as ``.lowered`` / ``.compiled``; being callable, they read
as functions given without arguments where a program was meant."""

from __future__ import annotations

from typing import Any

__all__ = ["jax_stage"]


def jax_stage(x: Any) -> Any:
    """The ``jax.stages.Compiled`` / ``Lowered`` that ``x`` holds as ``.compiled`` / ``.lowered`` (a flax.nnx
    stage); ``x`` itself when it is one of JAX's or holds none."""
    import jax

    stages = (jax.stages.Compiled, jax.stages.Lowered)
    if isinstance(x, stages):
        return x
    for attr in ("compiled", "lowered"):
        inner = getattr(x, attr, None)
        if isinstance(inner, stages):
            return inner
    return x
