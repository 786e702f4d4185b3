"""Do a program's rows couple? Detected at export, so that padding never changes an answer.

A loaded bundle may run a batch of 3 through the batch-4 program (padding) or a batch of 20 as chunks of 8.
Both are exact only when every output row depends on its own input row alone and no other output depends
on the rows at all. A batch mean, centering, a softmax or a sort over the batch axis, a batch statistic,
an output that counts the rows — each couples rows, and padding or chunking would change it.

:func:`detect_rows_independent` runs the program twice on the example input (``jax.jit`` on the default
device: two compiles, at ``n`` and ``n + 1`` rows, ``n >= 2``):

1. **perturb one row**: row 0 of every input replaced by other values; every other row of every batched
   output, and every non-batched output, must stay bit-identical;
2. **pad**: the input with one padding row appended (what the loader appends: zeros, or a copy of the last
   row for extended dtypes such as PRNG keys); the first ``n`` rows of batched outputs and every non-batched
   output must agree with the unpadded run (``rtol=1e-5``: another batch size is another program).

Any difference, or any failure while testing, means "coupled or unsure": the loader then never pads. The
test sees one input and one perturbation, so a coupling that these do not move (e.g. through an argmax the
perturbation leaves unchanged) can be missed: declare ``rows_independent=False`` at export when you know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["detect_rows_independent", "pad_rows", "is_extended"]


def is_extended(dtype: Any) -> bool:
    """True for JAX extended dtypes (typed PRNG keys ``key<fry>`` ...), which NumPy cannot hold."""
    import jax

    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.extended))
    except Exception:  # noqa: BLE001
        return False


def pad_rows(x: Any, rows: int) -> Any:
    """``x`` with ``rows`` rows appended on axis 0: zeros (NumPy, on the host), or for an extended dtype a
    copy of the last row (``jax.numpy``; keys have no zero)."""
    import numpy as np

    if rows <= 0:
        return x
    if is_extended(getattr(x, "dtype", None)):
        import jax.numpy as jnp

        return jnp.concatenate([x, jnp.repeat(x[-1:], rows, axis=0)])
    host = np.asarray(x)
    return np.concatenate([host, np.zeros((rows, *host.shape[1:]), host.dtype)])


def _example_rows(value: Any, aval: Any, n: int, seed: int) -> Any:
    """``n`` rows of input: the example's own rows (tiled when it has fewer), or random ones when the
    example is only a shape (``jax.ShapeDtypeStruct``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    shape = (n, *aval.shape[1:])
    if isinstance(value, jax.ShapeDtypeStruct) or not hasattr(value, "__array__") and not is_extended(aval.dtype):
        if is_extended(aval.dtype):
            raise ValueError(f"no example values for an input of dtype {aval.dtype}")
        rng = np.random.default_rng(seed)
        dt = np.dtype(aval.dtype)
        if dt.kind == "b":
            return rng.integers(0, 2, shape).astype(dt)
        if dt.kind in "iu":
            return rng.integers(0, 3, shape).astype(dt)
        return rng.standard_normal(shape).astype(dt)
    have = int(value.shape[0])
    if have >= n:
        return value[:n]
    reps = -(-n // have)
    if is_extended(aval.dtype):
        return jnp.concatenate([value] * reps)[:n]
    return np.concatenate([np.asarray(value)] * reps)[:n]


def _perturb_row0(x: Any) -> Any:
    import jax
    import numpy as np

    if is_extended(x.dtype):
        import jax.numpy as jnp

        fresh = jax.random.split(jax.random.key(20240611, impl=jax.random.key_impl(x)), 1)
        return jnp.concatenate([fresh, x[1:]])
    host = np.array(x)
    if host.dtype.kind == "b":
        host[0] = ~host[0]
    elif host.dtype.kind in "iu":
        host[0] = host[0] + 1
    else:
        row = host[0].astype(np.float64)
        host[0] = (row + 1.5 + 2.0 * np.abs(row)).astype(host.dtype)
    return host


def _host(leaf: Any):
    import jax
    import numpy as np

    if is_extended(leaf.dtype):
        return np.asarray(jax.random.key_data(leaf))
    return np.asarray(leaf)


def _equal(a, b) -> bool:
    import numpy as np

    try:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    except TypeError:
        return bool(np.array_equal(a, b))


def _close(a, b) -> bool:
    import numpy as np

    if a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc":
        return _equal(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    finite = np.isfinite(a64)
    scale = float(np.max(np.abs(a64[finite]))) if finite.any() else 1.0
    return bool(np.allclose(a64, b64, rtol=1e-5, atol=1e-6 * (1.0 + scale), equal_nan=True))


def detect_rows_independent(fn: Callable[..., Any], weights: Any, values: Sequence[Any],
                            avals: Sequence[Any]) -> tuple[bool, str]:
    """``(independent, why)`` for ``fn(weights, *inputs)`` returning a flat sequence of leaves.

    Args:
      fn: the bundle function (flat weights dict, positional inputs) returning a tuple of arrays.
      weights: name -> host array. values: the example inputs (arrays or ``jax.ShapeDtypeStruct``).
      avals: their shapes/dtypes (axis 0 is the batch axis).

    Never raises: a failure while testing is "unsure" (False) with the reason.
    """
    import jax

    try:
        n = max(2, min(8, *(int(v.shape[0]) for v in values)))
        base = [_example_rows(v, a, n, i) for i, (v, a) in enumerate(zip(values, avals, strict=False))]
        run = jax.jit(fn)
        y = [_host(leaf) for leaf in run(weights, *base)]
        y_perturbed = [_host(leaf) for leaf in run(weights, *[_perturb_row0(x) for x in base])]
        y_padded = [_host(leaf) for leaf in run(weights, *[pad_rows(x, 1) for x in base])]
    except Exception as e:  # noqa: BLE001 - unsure: never pad
        return False, f"the row test could not run ({type(e).__name__}: {str(e)[:200]})"
    for i, (a, b, c) in enumerate(zip(y, y_perturbed, y_padded, strict=False)):
        batched = a.ndim > 0 and a.shape[0] == n and c.ndim > 0 and c.shape[0] == n + 1
        if batched:
            if not _equal(a[1:], b[1:]):
                return False, f"output {i}: changing input row 0 changed other rows"
            if not _close(a, c[:n]):
                return False, f"output {i}: a padding row changed the other rows"
        else:
            if not _equal(a, b):
                return False, f"output {i} (not batched) depends on the input rows"
            if not _close(a, c):
                return False, f"output {i} (not batched) changed when a padding row was added"
    return True, f"each output row depends only on its input row (tested on {n} rows)"
