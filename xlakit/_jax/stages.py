"""JAX's own stage objects inside a library's wrappers: ``nnx.jit(f).lower(...)`` returns flax's ``Lowered``
and its ``compile()`` flax's ``Compiled`` (``flax.nnx.transforms.compilation``, flax 0.12), callables that hold
the ``jax.stages.Lowered`` / ``jax.stages.Compiled`` as ``.lowered`` / ``.compiled``; being callable, they read
as functions given without arguments where a program was meant."""

from __future__ import annotations

from typing import Any

__all__ = ["jax_stage", "program_arguments"]


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


def nnx_jit_function(x: Any) -> Any:
    """The ``nnx.jit`` function a flax.nnx ``Lowered`` / ``Compiled`` was made by (its ``jit_wrapped``), else None:
    its signature names the arguments, and the stage's graph definition their paths."""
    if not (type(x).__module__ or "").startswith("flax."):
        return None
    return getattr(x, "jit_wrapped", None)


def program_arguments(stage: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``(args, kwargs)`` as the JAX program of ``stage`` takes them: under ``nnx.jit`` the flax.nnx graph nodes
    a user passes (a Module, an ``nnx.Optimizer``) become the ``NodeStates`` pytrees the jitted function was
    lowered with, converted exactly as flax's own ``Compiled.__call__`` converts them (its wrapper's
    ``_get_pure_args_kwargs`` inside ``graphlib.update_context``, flax 0.12); any other stage's arguments as given."""
    wrapped = getattr(stage, "jit_wrapped", None)
    convert = getattr(wrapped, "_get_pure_args_kwargs", None)
    if convert is None:
        return tuple(args), dict(kwargs)
    from flax.nnx import graph

    with graph.update_context(wrapped):
        pure_args, pure_kwargs = convert(tuple(args), dict(kwargs))
    return tuple(pure_args), dict(pure_kwargs)
