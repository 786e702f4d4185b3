"""What a bundle records of each output leaf beyond its dtype: which axis is the batch, and its weak type.

Both facts come from JAX's own traces of the bundle function at export, never from the exported modules:

* **the batch axis** (:func:`probe_shapes`, :func:`output_specs`): an output's axis 0 is the batch axis when its
  length equals the batch size at *every* traced size. With one exported size that is no evidence (a bias of
  length 1 in a batch-1 export has the batch's length by chance, and was taken for the batch), so the function
  is also traced (``jax.eval_shape``, no compile) at one size that is not exported: a length that does not
  depend on the batch cannot equal two different sizes.
* **the weak type** (:func:`traced_weak_types`, :func:`restore_weak`): ``jax.jit`` returns a Python scalar (a
  ``0.5`` parameter passed through, ``x.sum() * 0 + 2.0``...) weakly typed, so that ``h_bf16 * out`` stays
  bfloat16. ``jax.export`` keeps no weak type in a module's ``out_avals`` (nor does its compiled program), so
  the manifest records it per output (``"weak_type": true``, from the ``jax.eval_shape`` of ``jax.jit``, which
  keeps it) and a loaded call marks those leaves weak again: same dtype, same bits. A manifest without the
  field (an older export) means not weak.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from xlakit.bundle.manifest import BATCH, TensorSpec, dtype_name

__all__ = ["probe_shapes", "traced_weak_types", "output_specs", "restore_weak"]


def probe_shapes(fn: Callable[..., Any], weight_avals: Any, input_avals: Sequence[Any],
                 sizes: Sequence[int]) -> tuple[int, list[tuple]] | None:
    """``(probe size, output leaf shapes)`` of ``fn(weights, *inputs)`` traced by ``jax.eval_shape`` at a batch
    size that is not exported (the next one, else twice the exported one), when only one size is (two exported
    sizes already tell a constant length from the batch). None when not needed, or when ``fn`` traces at neither
    (then the exported size is the only evidence, and the variant depends on the batch size anyway). Call it
    before the exports: ``fn`` keeps the output tree of its latest trace."""
    import jax

    if len(sizes) > 1:
        return None
    for probe in dict.fromkeys((sizes[0] + 1, 2 * sizes[0])):  # the next size, else an even one (paired rows)
        avals = [jax.ShapeDtypeStruct((probe, *a.shape[1:]), a.dtype) for a in input_avals]
        try:
            out = jax.eval_shape(fn, weight_avals, *avals)
        except Exception:  # noqa: BLE001 - no second size to compare with: try the next, else the exported decides
            continue
        return probe, [tuple(leaf.shape) for leaf in out]
    return None


def traced_weak_types(jitted: Callable[..., Any], *args: Any) -> list[bool]:
    """Per output leaf of ``jitted(*args)`` (a flat tuple), whether ``jax.jit`` returns it weakly typed: the
    ``weak_type`` of ``jax.eval_shape``'s results (``jax.export``'s ``out_avals`` drop it)."""
    import jax

    return [bool(getattr(leaf, "weak_type", False)) for leaf in jax.eval_shape(jitted, *args)]


def output_specs(variant: str, per_size: dict, probe: tuple[int, list[tuple]] | None = None
                 ) -> tuple[TensorSpec, ...]:
    """Output leaf specs with the batch axis named and the weak type recorded, checked to be consistent across
    batch sizes.

    ``per_size``: exported batch size -> (leaf key paths, leaf avals, leaf weak types) from the trace at that size.
    ``probe``: :func:`probe_shapes`' result, which only decides which leaves are batched (a size that was not
    exported may trace differently: that makes the variant size-dependent, not the export an error).
    Raises ValueError when a leaf's shape beyond axis 0, or its weak type, changes with the batch size."""
    from xlakit.bundle.weights import _path_name

    leaves_by_size = {b: [(_path_name(p) if p else "output", aval, weak)
                          for p, aval, weak in zip(paths, avals, weaks, strict=False)]
                      for b, (paths, avals, weaks) in per_size.items()}
    first_b, first = next(iter(leaves_by_size.items()))
    shapes_by_size = {b: [tuple(aval.shape) for _, aval, _ in leaves] for b, leaves in leaves_by_size.items()}
    if probe is not None and len(probe[1]) == len(first):  # another leaf count: that trace tells nothing here
        shapes_by_size[probe[0]] = probe[1]
    specs = []
    for i, (oname, aval, weak) in enumerate(first):
        batched = all(_follows(shapes[i], b) for b, shapes in shapes_by_size.items())
        rest = tuple(aval.shape[1:]) if batched else tuple(aval.shape)
        for b, leaves in leaves_by_size.items():
            other = tuple(leaves[i][1].shape[1:]) if batched else tuple(leaves[i][1].shape)
            if other != rest:
                raise ValueError(f"variant {variant!r}: output {oname!r} has shape {list(leaves[i][1].shape)} at batch "
                                 f"size {b} but {list(aval.shape)} at batch size {first_b}; only axis 0 may follow "
                                 "the batch size")
            if leaves[i][2] != weak:
                raise ValueError(f"variant {variant!r}: output {oname!r} is {_weak_word(leaves[i][2])} at batch size "
                                 f"{b} but {_weak_word(weak)} at batch size {first_b}; a bundle records one weak type "
                                 "per output (return it as jnp.asarray(out, dtype) to make it strong)")
        specs.append(TensorSpec(oname, (BATCH, *rest) if batched else rest, dtype_name(aval.dtype), weak))
    return tuple(specs)


def _follows(shape: tuple, batch: int) -> bool:
    return len(shape) > 0 and shape[0] == batch


def _weak_word(weak: bool) -> str:
    return "weakly typed" if weak else "strongly typed"


def restore_weak(leaves: list, specs: Sequence[TensorSpec]) -> list:
    """``leaves`` (a loaded program's outputs, in manifest order) with each leaf the manifest records as weakly
    typed marked weak again, as ``jax.jit`` returned it: same dtype, device and bits. Where this JAX has no way to
    mark it (see :func:`xlakit._jax.export_compat.weakly_typed`) a ``RuntimeWarning`` says so and the leaves come
    back strongly typed."""
    if not any(spec.weak_type for spec in specs):
        return leaves
    from xlakit._jax.export_compat import weakly_typed

    out = list(leaves)
    try:
        for i, spec in enumerate(specs[:len(out)]):
            if spec.weak_type and not getattr(out[i], "weak_type", True):
                out[i] = weakly_typed(out[i])
    except RuntimeError as e:
        warnings.warn(f"outputs {[s.name for s in specs if s.weak_type]} come back strongly typed: {e}",
                      RuntimeWarning, stacklevel=3)
        return list(leaves)
    return out
