"""``make_args(batch)`` as the signature of the program the user runs, without making a batch per size.

``sweep`` and ``max_batch`` compile a program per batch size from ``jax.ShapeDtypeStruct`` arguments, so no
batch is allocated and what builds one (``jnp.ones``, an initialiser) is not compiled per size. A shape and
dtype are not the whole signature: how each argument is placed decides the program XLA builds — an argument
sharded over 4 devices makes an SPMD program whose buffers are a quarter of the size on each device, a
weakly typed scalar keeps the arithmetic in the other operand's dtype, an argument in ``pinned_host`` memory is
not in device memory. ``jax.eval_shape`` keeps the weak type but not the placement (under tracing a
``device_put`` gives an abstract mesh, its axes unnamed). So ``make_args`` is traced with ``jax.make_jaxpr``
and each leaf's placement read from what placed it: a ``device_put`` (to a sharding, with its memory kind, or
a device), a sharding constraint, a jitted builder's declared ``out_shardings``, or an array made before (its
own ``sharding``; an uncommitted one, like a leaf built from nothing placed, goes where JAX puts it, the default
device). Elementwise arithmetic keeps its operand's placement, as it does when run. Any other operation on
placed values (a transpose, a jitted builder that places inside, a ``device_put`` to a memory space alone) is
compiled alone from its operands' placements, as JAX runs it eagerly, and its output shardings read: JAX's own
answer, one small compile of that operation per size. Where even that fails, the arguments are made for real.
Before the first trace of a ``sweep`` or ``max_batch`` call, ``make_args`` is built for real once, at the first
size that builds (:class:`Builder`): a builder that keeps what it made (parameters in a dict, an ``lru_cache``'d
initialiser) then keeps arrays, not tracers, and a leaf the trace leaves unplaced takes that build's placement (a
creation op's ``device=``, ``jnp.zeros(shape, device=sharding)`` or ``zeros_like`` of a sharded array, traces to a
``broadcast_in_dim`` that carries no placement). Limit: a placement that differs by batch size is read at that
first size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["abstract_args", "Builder"]

_UNKNOWN = object()  # a placement the trace does not tell

# Primitives that compute each element from the same element of their operands: run on placed operands of the
# output's shape, JAX keeps their placement.
_ELEMENTWISE = frozenset({
    "abs", "acos", "acosh", "add", "and", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "clamp",
    "clz", "complex", "conj", "convert_element_type", "copy", "copy_p", "cos", "cosh", "digamma", "div", "eq",
    "erf", "erf_inv", "erfc", "exp", "exp2", "expm1", "floor", "ge", "gt", "imag", "integer_pow", "is_finite",
    "le", "lgamma", "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg", "nextafter", "not", "or",
    "population_count", "pow", "real", "reduce_precision", "rem", "round", "rsqrt", "select_n", "shift_left",
    "shift_right_arithmetic", "shift_right_logical", "sign", "sin", "sinh", "sqrt", "square", "sub", "tan",
    "tanh", "xor"})


def abstract_args(fn: Any, make_args: Callable[[int], Any], batch: int) -> tuple:
    """``make_args(batch)`` with its array leaves as ``jax.ShapeDtypeStruct`` of their shape, dtype, weak type
    and placement (sharding, memory kind). Everything else stays as ``make_args`` made it: the arguments ``fn``
    takes as static (``static_argnums`` / ``static_argnames``: its ``if train:`` needs the value), Python scalars,
    strings and other objects (a Python scalar is no batch's array; ``jit`` makes it a weakly typed scalar
    itself), and ``ShapeDtypeStruct`` leaves. Arguments that cannot be traced (``make_args`` needs concrete
    values) are made concretely instead."""
    import jax
    import numpy as np

    from xlakit._jax.static_args import static_positions

    kept: list[tuple[bool, Any, list[Any], list[bool]]] = []  # per argument: static?, treedef, leaves, is_array

    def arrays() -> list[Any]:
        made = make_args(batch)
        made = made if isinstance(made, tuple) else (made,)
        static = static_positions(fn, len(made))
        out: list[Any] = []
        kept.clear()
        for i, arg in enumerate(made):
            if i in static:  # hashable and compared by value: kept whole, never flattened
                kept.append((True, arg, [], []))
                continue
            leaves, treedef = jax.tree.flatten(arg)
            is_array = [isinstance(v, (jax.Array, np.ndarray, np.generic)) for v in leaves]
            out += [v for v, a in zip(leaves, is_array, strict=True) if a]
            kept.append((False, treedef, [None if a else v for v, a in zip(leaves, is_array, strict=True)], is_array))
        return out

    def concrete() -> tuple:
        made = make_args(batch)
        return made if isinstance(made, tuple) else (made,)

    builder = make_args if isinstance(make_args, Builder) else Builder(make_args)
    if builder.placements is None:
        # built for real once, first: a builder that keeps what it made (params in a dict, an lru_cache'd init)
        # keeps arrays, not the trace's tracers; and a creation op's device= (jnp.zeros(..., device=s), zeros_like
        # of a sharded array) traces to a broadcast that carries no placement, but runs placed
        builder.placements = _eager_placements(fn, builder.make_args, batch) or None
    try:
        closed = jax.make_jaxpr(arrays)()
        placements = _placements(closed)
    except Exception:  # noqa: BLE001 - e.g. a concrete-value branch in make_args: build the real arguments
        return concrete()
    eager = builder.placements
    if eager is not None and len(eager) == len(placements):
        placements = [e if p is None else p for p, e in zip(placements, eager, strict=True)]
    shapes = iter([jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=p, weak_type=aval.weak_type)
                   for aval, p in zip(closed.out_avals, placements, strict=True)])
    return tuple(whole if static else jax.tree.unflatten(
        whole, [next(shapes) if a else v for v, a in zip(leaves, is_array, strict=True)])
        for static, whole, leaves, is_array in kept)


class Builder:
    """``make_args`` for one ``sweep`` or ``max_batch`` call, with the placements of its array leaves as one real
    build showed them (None until a build succeeds). Made per call, never kept: a notebook may change the
    sharding ``make_args`` reads between two sweeps."""

    def __init__(self, make_args: Callable[[int], Any]) -> None:
        self.make_args = make_args
        self.placements: list[Any] | None = None

    def __call__(self, batch: int) -> Any:
        return self.make_args(batch)


def _eager_placements(fn: Any, make_args: Callable[[int], Any], batch: int) -> list[Any]:
    """Per array leaf of ``make_args(batch)`` (static arguments left out, as :func:`abstract_args` leaves them): its
    sharding where committed, else None; ``[]`` when the build fails."""
    import jax
    import numpy as np

    from xlakit._jax.static_args import static_positions

    try:
        made = make_args(batch)
    except Exception:  # noqa: BLE001 - e.g. a size the placement cannot split: keep what the trace said
        return []
    made = made if isinstance(made, tuple) else (made,)
    static = static_positions(fn, len(made))
    out: list[Any] = []
    for i, arg in enumerate(made):
        if i in static:
            continue
        for leaf in jax.tree.leaves(arg):
            if isinstance(leaf, (jax.Array, np.ndarray, np.generic)):
                out.append(_of_value(leaf))
    return out


def _concrete(sharding: Any) -> Any:
    """``sharding`` where it names real devices, else None (unspecified, or over an abstract mesh)."""
    import jax

    if not isinstance(sharding, jax.sharding.Sharding):
        return None
    try:
        sharding.device_set  # noqa: B018 - raises for an abstract mesh
    except Exception:  # noqa: BLE001
        return None
    return sharding


def _of_value(value: Any) -> Any:
    """The placement of a constant of the trace: a committed ``jax.Array``'s sharding; None (JAX places it)
    for an uncommitted one, numpy and scalars."""
    import jax

    if isinstance(value, jax.Array) and getattr(value, "committed", False):
        return value.sharding
    return None


def _placements(closed: Any) -> list[Any]:
    """Per output of the closed jaxpr: a ``Sharding``, or None (uncommitted: JAX's default placement)."""
    env = {v: _of_value(c) for v, c in zip(closed.jaxpr.constvars, closed.consts, strict=True)}
    for eqn in closed.jaxpr.eqns:
        outs = _eqn(eqn, [_read(env, a) for a in eqn.invars])
        for v, p in zip(eqn.outvars, outs, strict=True):
            env[v] = p
    return [_read(env, v) for v in closed.jaxpr.outvars]


def _read(env: dict, atom: Any) -> Any:
    from jax.extend.core import Literal

    return None if isinstance(atom, Literal) else env[atom]


def _eqn(eqn: Any, ins: list[Any]) -> list[Any]:
    import jax

    name = eqn.primitive.name
    n = len(eqn.outvars)
    if name == "device_put" and all(t is None or isinstance(t, jax.Device) or _concrete(t) is not None
                                    for t in eqn.params["devices"]):
        return [src if target is None  # device_put(x): x stays where it is
                else jax.sharding.SingleDeviceSharding(target) if isinstance(target, jax.Device) else target
                for target, src in zip(eqn.params["devices"], ins, strict=True)]
    if name == "sharding_constraint" and _concrete(eqn.params.get("sharding")) is not None:
        return [eqn.params["sharding"]]
    declared = eqn.params.get("out_shardings") if name in ("jit", "pjit") else None
    if declared and all(_concrete(d) is not None for d in declared):  # a jitted builder's out_shardings: no compile
        return list(declared)
    placing = _places(eqn)
    if not placing and all(p is None for p in ins):  # nothing placed in, nothing placed out: JAX's default
        return [None] * n
    placed = {p for p in ins if p is not None}
    shapes = {tuple(a.aval.shape) for a, p in zip(eqn.invars, ins, strict=True) if p is not None}
    if (not placing and name in _ELEMENTWISE and len(placed) == 1
            and shapes == {tuple(v.aval.shape) for v in eqn.outvars}):
        return [placed.pop()] * n
    return _compiled_alone(eqn, ins)


def _compiled_alone(eqn: Any, ins: list[Any]) -> list[Any]:
    """The output shardings of ``eqn`` compiled alone from its operands' placements: what JAX's eager dispatch
    compiles for it."""
    import jax
    from jax.extend.core import ClosedJaxpr, Jaxpr, Literal, jaxpr_as_fun

    invars: list[Any] = []
    specs: list[Any] = []
    for atom, p in zip(eqn.invars, ins, strict=True):
        if isinstance(atom, Literal) or atom in invars:
            continue
        invars.append(atom)
        specs.append(jax.ShapeDtypeStruct(atom.aval.shape, atom.aval.dtype, sharding=p, weak_type=atom.aval.weak_type))
    one = Jaxpr([], invars, list(eqn.outvars), [eqn], eqn.effects)
    out = jax.jit(jaxpr_as_fun(ClosedJaxpr(one, []))).lower(*specs).compile().output_shardings
    if all(p is None for p in ins):  # from nothing placed: an output JAX put on its default device stays uncommitted
        default = jax.devices()[0]
        out = [None if isinstance(s, jax.sharding.SingleDeviceSharding) and s.device_set == {default}
               and s.memory_kind in (None, default.default_memory().kind) else s for s in out]
    return list(out)


def _places(eqn: Any) -> bool:
    """Whether ``eqn`` may place a value itself: a placing operation, a sharding or device among its parameters
    (a jitted computation's declared shardings), or a placing operation in a computation it holds (a jitted
    body, a loop body, a custom derivative)."""
    import jax
    from jax.extend.core import jaxprs_in_params

    if eqn.primitive.name in ("device_put", "sharding_constraint", "shard_map", "mesh_cast", "reshard"):
        return True
    for value in eqn.params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, jax.Device) or _concrete(v) is not None:
                return True
    return any(_places(e) for j in jaxprs_in_params(eqn.params) for e in j.eqns)
