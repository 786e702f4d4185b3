"""How a bundle knows that padding and chunking never change an answer: :func:`establish_rows`, per variant.

A loaded bundle may run a batch of 3 through the batch-4 program (padding) or a batch of 20 as chunks of 8.
That is exact only for a *row-wise* program (each output row a function of its own input row, the same for
every row and every batch size; other outputs free of the rows). The export establishes it in three steps,
compiling only for step 3:

1. **trace with a symbolic batch** (:func:`xlakit._jax.symbolic.trace_symbolic`): a function that cannot be
   traced so (``if x.shape[0] >= 16`` raises), or whose Python code decides something about the size that the
   symbolic trace cannot know (``x.shape[0] == 7``, ``if x.shape[0] % 2``), depends on the batch size;
2. **prove** the symbolic jaxpr row-wise (:func:`xlakit.bundle.row_proof.prove_rows`), for every batch size;
3. **compare** the symbolic program (``jax.export`` with the symbolic batch) with the program traced at each
   exported size, on one batch of that size made from the example's rows (random ones for a shape-only
   example; ``jax.jit``, two compiles per size): a difference also means the function depends on the batch
   size (e.g. ``isinstance(x.shape[0], int)``, which compares nothing). Outputs are compared, not jaxprs:
   JAX traces a symbolic size along other paths than a concrete one (a static slice becomes a ``gather``,
   ``x.shape[0]`` a ``dim_as_value``), so the jaxprs of a size-independent function differ as well, and a
   structural comparison would refuse nearly every program. Step 1 is the sound guard for decisions; step 3
   catches other differences on the batch it sees.

Outcomes (``Manifest.row_independence``): ``proven`` (padded and chunked), ``coupled`` (never padded: each
batch size is compiled exactly from the shape-polymorphic module), ``size-dependent`` (served only at the
exported sizes), or ``declared`` (the exporter's ``rows_independent=`` override, which is trusted as given).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from xlakit._jax.symbolic import brief_error
from xlakit._record import Record

__all__ = ["RowRecord", "establish_rows", "pad_rows", "is_extended"]


def is_extended(dtype: Any) -> bool:
    """True for JAX extended dtypes (typed PRNG keys ``key<fry>`` ...), which NumPy cannot hold."""
    import jax

    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.extended))
    except Exception:  # noqa: BLE001
        return False


def pad_rows(x: Any, rows: int) -> Any:
    """``x`` with ``rows`` rows appended on axis 0: zeros (NumPy, on the host), or for an extended dtype a
    copy of the last row (``jax.numpy``; keys have no zero), or with no row to copy, keys made of zero key data."""
    import numpy as np

    if rows <= 0:
        return x
    if is_extended(getattr(x, "dtype", None)):
        import jax
        import jax.numpy as jnp

        if x.shape[0] == 0:  # 0 rows: padding no returned row can see, made from zero key data of x's kind
            data = jax.random.key_data(x)
            return jax.random.wrap_key_data(jnp.zeros((rows, *data.shape[1:]), data.dtype),
                                            impl=jax.random.key_impl(x))
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
    wide = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64  # never drop an imaginary part
    a64, b64 = a.astype(wide), b.astype(wide)
    finite = np.isfinite(a64)
    scale = float(np.max(np.abs(a64[finite]))) if finite.any() else 1.0
    return bool(np.allclose(a64, b64, rtol=1e-5, atol=1e-6 * (1.0 + scale), equal_nan=True))




class RowRecord(Record):
    """How row independence of one variant was established.

    Attributes:
      how: ``"proven"``, ``"declared"``, ``"coupled"`` or ``"size-dependent"`` (see the module docstring).
      independent: whether calls may be padded and chunked (proven, or declared True).
      reason: what was proven, what couples the rows (primitive and source line), or why the function
        depends on the batch size.
      poly: the serialized shape-polymorphic module, kept for a variant whose symbolic program agrees with its
        exports (exact batch sizes are compiled from it: always where rows couple, with ``load_bundle(exact=True)``
        where they are proven independent); else None.
    """

    how: str
    independent: bool
    reason: str
    poly: bytes | None = None


def establish_rows(fn: Callable[..., Any], weights: dict[str, Any], input_avals: Sequence[Any],
                   examples: Sequence[Any], sizes: Sequence[int], batched: Sequence[bool],
                   platforms: Sequence[str] | None, declared: bool | None, batch_name: str = "batch") -> RowRecord:
    """Steps 1-3 of the module docstring for ``fn(weights, *inputs)`` (a flat tuple of leaves out).

    Args:
      fn: the bundle function. weights: name -> host array. input_avals: inputs' shapes (axis 0 batch).
      examples: the example inputs (their values seed step 3's random batch). sizes: exported batch sizes.
      batched: per output leaf, whether it is batched. platforms: ``jax.export`` platforms.
      declared: the exporter's ``rows_independent`` for this variant, or None. True skips steps 1-3.
      batch_name: the symbol of the batch axis (the manifest's ``"batch"``).

    Never raises: a failure in a step is recorded as the reason (never padded).
    """
    import jax

    from xlakit._jax.symbolic import trace_symbolic
    from xlakit.bundle.row_proof import prove_rows

    weight_avals = {n: jax.ShapeDtypeStruct(a.shape, a.dtype) for n, a in weights.items()}
    (batch,) = jax.export.symbolic_shape(batch_name)
    avals = [jax.ShapeDtypeStruct((batch, *a.shape[1:]), a.dtype) for a in input_avals]
    trace = trace_symbolic(fn, weight_avals, *avals)
    if trace.problem is not None:
        problem = f"it cannot be traced with a symbolic batch axis ({trace.problem})"
    elif trace.guesses:
        problem = f"its code decides on the batch size ({trace.guesses[0]})"
    else:
        problem = None
    # Declared independent: not analysed, but the symbolic module is still kept where it agrees with the exports
    # (load_bundle(exact=True) compiles each size called from it)
    verdict = prove_rows(trace.jaxpr, len(weight_avals), batched) if problem is None and declared is not True \
        else None
    poly = None
    try:
        if problem is None:
            poly, problem = _symbolic_export(fn, weight_avals, avals, batched, platforms)
        if problem is None and poly is not None:
            local: bytes | None = poly  # compared here: a module for other platforms only is exported again
            if not _runs_here(poly):
                local, problem = _symbolic_export(fn, weight_avals, avals, batched, None)
            if local is not None:
                problem = _disagreement(fn, local, weights, input_avals, examples, sizes)
    except Exception as e:  # noqa: BLE001 - whatever failed, the symbolic program is not known to agree
        poly, problem = None, f"its symbolic program could not be checked ({brief_error(e)})"

    if declared is True:
        return RowRecord("declared", True, "declared rows_independent=True at export (not analysed)",
                         poly if problem is None else None)
    if declared is False:
        found = problem or (verdict.reason if verdict else "")
        return RowRecord("declared", False, f"declared rows_independent=False at export; the analysis: {found}",
                         poly if problem is None else None)
    if problem is not None:
        return RowRecord("size-dependent", False, problem)
    assert verdict is not None
    if verdict.proven:  # the module is kept too: load_bundle(exact=True) compiles each size called from it
        return RowRecord("proven", True, verdict.reason, poly)
    return RowRecord("coupled", False, verdict.reason, poly)


def _symbolic_export(fn, weight_avals, avals, batched, platforms) -> tuple[bytes | None, str | None]:
    """``(serialized module, None)`` exported with the symbolic batch, or ``(None, why not)``."""
    import jax

    from xlakit._jax.export_compat import no_source_locations

    try:
        with no_source_locations():
            exp = jax.export.export(jax.jit(fn), platforms=platforms)(weight_avals, *avals)
        for i, (want, aval) in enumerate(zip(batched, exp.out_avals, strict=True)):
            dims = tuple(aval.shape)
            if want != (bool(dims) and not isinstance(dims[0], int)) or any(not isinstance(d, int) for d in dims[1:]):
                was = "axis 0 following the batch size" if want else "no axis following the batch size"
                return None, (f"output {i} has shape {dims} when traced with a symbolic batch size, but "
                              f"{was} at the exported sizes")
        return bytes(exp.serialize()), None
    except Exception as e:  # noqa: BLE001 - shape polymorphism has many limits
        return None, f"it cannot be exported with a symbolic batch axis ({brief_error(e)})"


def _runs_here(module: bytes) -> bool:
    """Whether the serialized ``jax.export`` module was exported for this process's default backend."""
    import jax

    backend = jax.default_backend()
    names = {"cuda", "rocm"} if backend == "gpu" else {backend}
    return bool(names & set(jax.export.deserialize(bytearray(module)).platforms))


def _disagreement(fn, poly: bytes, weights, input_avals, examples, sizes) -> str | None:
    """Step 3: None when the symbolic program and ``fn`` traced at each exported size give the same outputs
    (``rtol=1e-5``) on one random batch of that size, else which size and output differ."""
    import jax

    exp = jax.export.deserialize(bytearray(poly))
    symbolic, concrete = jax.jit(exp.call), jax.jit(fn)
    for b in sizes:
        try:
            xs = [_example_rows(v, a, b, seed=b + i)
                  for i, (v, a) in enumerate(zip(examples, input_avals, strict=True))]
            want = [_host(leaf) for leaf in concrete(weights, *xs)]
            got = [_host(leaf) for leaf in symbolic(weights, *xs)]
        except Exception as e:  # noqa: BLE001
            return f"its symbolic program could not be compared at batch size {b} ({brief_error(e)})"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if not _close(g, w):
                return f"its symbolic program differs from the batch-{b} export (output {i})"
    return None
