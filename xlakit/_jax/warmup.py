"""Run a loaded executable once on zeros, so its first-execution cost is paid before the user's first call.

XLA:CPU's first execution of a program costs more than its second (measured in
``benchmarks/first_execution.py``: process-wide runtime state on the first execution of any program with a
matmul, per-executable state, and JAX building the ``Compiled`` object's C++ dispatch path on its first
call). None of it depends on the argument *values*, so one run on zero-filled arguments of the program's own
input avals pays it, and the user's first call then costs what a second call costs.

Caveat: a program whose control flow depends on its inputs (a ``while_loop`` stepping by an input) may run
longer, or forever, on zeros; warm up only programs whose loops have fixed trip counts (``scan``, ``fori_loop``
with static bounds), as exported inference programs do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["WarmupResult", "warm_up", "zero_arguments"]


@dataclass(frozen=True)
class WarmupResult:
    """What :func:`warm_up` did.

    Attributes:
      ok: the program ran to completion on zeros.
      seconds: wall time of building the zero arguments, the run and ``block_until_ready``
        (``time.perf_counter``); for a failed warm-up, the seconds spent before it failed.
      reason: why it did not run or failed (``"TypeError: ..."``), else None.
    """

    ok: bool
    seconds: float
    reason: str | None = None


def zero_arguments(compiled: Any) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of zero-filled arrays matching ``compiled.args_info`` (a ``jax.stages.Compiled``).

    Each array has its argument's shape and dtype and is placed with the executable's own input sharding
    (``compiled.input_shardings``), so the call dispatches exactly as a real one does. Every call builds new
    arrays, so a donated argument is never one the caller holds.

    Raises:
      TypeError: an argument has no shape/dtype (e.g. a token) or an extended dtype other than a typed PRNG
        key (whose zero is all-zero key data of its implementation), for which no zero value exists.
    """
    import jax
    import numpy as np
    from jax import dtypes
    from jax._src.stages import ArgInfo

    infos, treedef = jax.tree_util.tree_flatten(compiled.args_info, is_leaf=lambda x: isinstance(x, ArgInfo))
    try:
        shardings = jax.tree_util.tree_leaves(compiled.input_shardings, is_leaf=lambda x: x is None)
    except Exception:  # noqa: BLE001 - a backend without input shardings: place on the default device
        shardings = [None] * len(infos)
    if len(shardings) != len(infos):
        shardings = [None] * len(infos)
    leaves = []
    for i, (info, sharding) in enumerate(zip(infos, shardings, strict=True)):
        try:
            shape, dtype = tuple(info.shape), info.dtype
        except TypeError as e:
            raise TypeError(f"argument {i}: {e}; no zero value can be built for it") from None
        if dtypes.issubdtype(dtype, dtypes.prng_key) and getattr(dtype, "_impl", None) is not None:
            # A typed PRNG key (dtype key<impl>): all-zero key data of its implementation, wrapped.
            impl = dtype._impl
            host = jax.random.wrap_key_data(jax.numpy.zeros(shape + tuple(impl.key_shape), np.uint32), impl=impl)
        elif dtypes.issubdtype(dtype, dtypes.extended):
            raise TypeError(f"argument {i}: extended dtype {dtype} has no zero host array")
        else:
            host = np.zeros(shape, dtype)
        leaves.append(jax.device_put(host, sharding) if sharding is not None else jax.device_put(host))
    args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
    return tuple(args), dict(kwargs)


def warm_up(compiled: Any) -> WarmupResult:
    """Run ``compiled`` (a ``jax.stages.Compiled``) once on :func:`zero_arguments` and wait for it.

    Never raises into the caller: a failure (no zero value for an argument, an XLA error, a missing
    attribute on another JAX version) is returned as ``ok=False`` with the reason, and the executable stays
    as usable as before (its outputs are dropped; donated inputs are the zeros built here).
    """
    start = time.perf_counter()
    try:
        import jax

        args, kwargs = zero_arguments(compiled)
        jax.block_until_ready(compiled(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - warming up is an optimisation; it must never fail a load
        return WarmupResult(False, time.perf_counter() - start, f"{type(e).__name__}: {e}")
    return WarmupResult(True, time.perf_counter() - start)
