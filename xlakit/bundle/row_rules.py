"""Row rules: how each primitive maps its operands' row states to its results' (see
:mod:`xlakit.bundle.row_proof`, which runs them). A state is ``None`` (row-free) or the row axis ``k``; a rule raises
:class:`~xlakit.bundle.row_proof.CoupleError` where rows meet. Rules are conservative: a pattern not matched
exactly couples. The result's shape is checked by the caller (``batch`` exactly at the row axis).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["RULES", "Coupled", "CoupleError", "has_subprogram", "mentions_symbolic"]


@dataclass(frozen=True)
class Coupled:
    """The row state of a value that may depend on several rows (or on the row position or batch size)."""

    reason: str


class CoupleError(Exception):
    """Raised by a rule: the primitive couples rows here (the message says how)."""

Rule = Callable[[Any, Any, list], list]  # (the Proof, the equation, operand states) -> result states
RULES: dict[str, Rule] = {}

# Elementwise (size-1 axes broadcast in lax): a result element reads the operands' elements at its position.
_ELEMENTWISE = """abs acos acosh add and asin asinh atan atan2 atanh bessel_i0e bessel_i1e cbrt ceil clamp clz complex
conj convert_element_type copy copy_p cos cosh digamma div eq erf erf_inv erfc exp exp2 expm1 floor ge gt igamma
igamma_grad_a igammac imag integer_pow is_finite le lgamma log log1p logistic lt max min mul ne neg nextafter not
or polygamma population_count pow random_gamma_grad real reduce_precision regularized_incomplete_beta rem round
rsqrt select_n shift_left shift_right_arithmetic shift_right_logical sign sin sinh sqrt square stop_gradient sub
tan tanh xor zeta""".split()
# Per element of the leading axes, with axes added or removed at the end (bits of a key, words of a dtype).
_LEADING = """bitcast_convert_type random_bits random_clone random_fold_in random_seed random_split random_unwrap
random_wrap threefry2x32""".split()
_IDENTITY = "device_put optimization_barrier pvary reshard mesh_cast sharding_constraint".split()
_REDUCTIONS = "reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor argmax argmin".split()
_CUMULATIVE = "cumsum cumprod cummax cummin cumlogsumexp".split()
_CALLS = "jit pjit closed_call core_call remat remat2 checkpoint custom_jvp_call custom_vjp_call".split()
_SCATTERS = "scatter scatter-add scatter_add scatter-mul scatter_mul scatter-min scatter_min scatter-max scatter_max"


def rule(*names: str):
    def register(fn: Rule) -> Rule:
        for n in names:
            RULES[n] = fn
        return fn
    return register


def has_subprogram(eqn: Any) -> bool:
    from jax.extend.core import jaxprs_in_params

    return bool(list(jaxprs_in_params(eqn.params)))


def mentions_symbolic(value: Any) -> bool:
    """True when a parameter holds a symbolic dimension (e.g. a loop of ``batch`` steps)."""
    from xlakit._jax.symbolic import is_symbolic

    if isinstance(value, dict):
        return any(mentions_symbolic(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return any(mentions_symbolic(v) for v in value)
    return is_symbolic(value)


def _rows(ins: list) -> list[int]:
    return [s for s in ins if s is not None]


def _one_axis(ins: list) -> int | None:
    """The common row axis of the row-wise operands (None when all are row-free)."""
    axes = set(_rows(ins))
    if len(axes) > 1:
        raise CoupleError(f"combines rows on different axes {sorted(axes)}")
    return axes.pop() if axes else None


def _shape(x: Any) -> tuple:
    return tuple(getattr(x.aval, "shape", ()))


@rule(*_ELEMENTWISE)
def _elementwise(p: Any, eqn, ins):
    k = _one_axis(ins)
    rank = len(_shape(eqn.outvars[0]))
    for x, s in zip(eqn.invars, ins, strict=True):
        if s is not None and len(_shape(x)) != rank:
            raise CoupleError("broadcasts a row-wise operand to another rank")
    return [k] * len(eqn.outvars)


@rule(*_LEADING)
def _leading(p: Any, eqn, ins):
    k = _one_axis(ins)
    if k is not None and any(len(_shape(v)) <= k for v in eqn.outvars):
        raise CoupleError("drops the row axis")
    return [k] * len(eqn.outvars)


@rule(*_IDENTITY)
def _identity(p: Any, eqn, ins):
    if len(ins) != len(eqn.outvars):
        raise CoupleError("has operands and results that do not pair up")
    return list(ins)


@rule(*_REDUCTIONS, "reduce")
def _reduce(p: Any, eqn, ins):
    axes = tuple(eqn.params.get("axes", eqn.params.get("dimensions", ())))
    n_out = len(eqn.outvars)
    operands = ins[:n_out] if eqn.primitive.name == "reduce" else ins
    if any(s is not None for s in ins[len(operands):]):
        raise CoupleError("starts from a row-dependent value")
    k = _one_axis(operands)
    if k is None:
        return [None] * n_out
    if k in axes:
        raise CoupleError("reduces over the row axis")
    return [k - sum(a < k for a in axes)] * n_out


@rule("reduce_window_sum", "reduce_window_max", "reduce_window_min", "reduce_window")
def _reduce_window(p: Any, eqn, ins):
    n_out = len(eqn.outvars)
    if any(s is not None for s in ins[n_out:]):
        raise CoupleError("starts from a row-dependent value")
    k = _one_axis(ins[:n_out])
    if k is None:
        return [None] * n_out
    prm = eqn.params
    one = {"window_dimensions": 1, "window_strides": 1, "base_dilation": 1, "window_dilation": 1}
    if any(tuple(prm.get(name, (1,) * (k + 1)))[k] != want for name, want in one.items()) or \
            tuple(prm.get("padding", ((0, 0),) * (k + 1))[k]) != (0, 0):
        raise CoupleError("pools across the row axis")
    return [k] * n_out  # windows lie within one row (pooling over spatial axes)


@rule(*_CUMULATIVE)
def _cumulative(p: Any, eqn, ins):
    (k,) = ins
    if k is not None and eqn.params["axis"] == k:
        raise CoupleError("accumulates along the row axis")
    return [k]


@rule("sort")
def _sort(p: Any, eqn, ins):
    k = _one_axis(ins)
    if k is not None and (eqn.params["dimension"] == k or None in ins):
        raise CoupleError("sorts along the row axis")
    return [k] * len(eqn.outvars)


@rule("top_k")
def _top_k(p: Any, eqn, ins):
    (k,) = ins
    axis = eqn.params.get("axis", len(_shape(eqn.invars[0])) - 1)
    if k is not None and axis in (k, k - len(_shape(eqn.invars[0]))):
        raise CoupleError("selects along the row axis")
    return [k] * len(eqn.outvars)


@rule("transpose")
def _transpose(p: Any, eqn, ins):
    (k,) = ins
    return [None if k is None else tuple(eqn.params["permutation"]).index(k)]


@rule("broadcast_in_dim")
def _broadcast(p: Any, eqn, ins):
    k = ins[0]
    if any(s is not None for s in ins[1:]):
        raise CoupleError("has a row-dependent shape operand")
    if k is not None:
        return [eqn.params["broadcast_dimensions"][k]]
    shape = _shape(eqn.outvars[0])
    at = [i for i, d in enumerate(shape) if p.is_batch(d)]
    return [at[0] if len(at) == 1 else None]  # a row-free value repeated along the rows: the same in each row


@rule("squeeze")
def _squeeze(p: Any, eqn, ins):
    (k,) = ins
    dims = tuple(eqn.params["dimensions"])
    if k is None:
        return [None]
    if k in dims:
        raise CoupleError("removes the row axis")
    return [k - sum(d < k for d in dims)]


@rule("reshape")
def _reshape(p: Any, eqn, ins):
    k = ins[0]
    if k is None:
        return [None]
    if eqn.params.get("dimensions") is not None or any(s is not None for s in ins[1:]):
        raise CoupleError("reorders the row axis")
    old, new = _shape(eqn.invars[0]), tuple(eqn.params["new_sizes"])
    before, after = old[:k], old[k + 1:]
    if not all(isinstance(d, int) for d in before + after):
        raise CoupleError("mixes the row axis with another symbolic axis")
    for j, d in enumerate(new):
        rest = new[:j] + new[j + 1:]
        if p.is_batch(d) and all(isinstance(e, int) for e in rest) and math.prod(new[:j]) == math.prod(before) \
                and math.prod(new[j + 1:]) == math.prod(after):
            return [j]  # the axes before and after the rows are regrouped among themselves
    raise CoupleError("merges or splits the row axis")


@rule("rev")
def _rev(p: Any, eqn, ins):
    (k,) = ins
    if k is not None and k in tuple(eqn.params["dimensions"]):
        raise CoupleError("reverses the row axis")
    return [k]


@rule("concatenate")
def _concatenate(p: Any, eqn, ins):
    k = _one_axis(ins)
    if k is not None and (eqn.params["dimension"] == k or None in ins):
        raise CoupleError("joins along the row axis")
    return [k]


@rule("split")
def _split(p: Any, eqn, ins):
    (k,) = ins
    if k is not None and eqn.params["axis"] == k:
        raise CoupleError("splits the row axis")
    return [k] * len(eqn.outvars)


@rule("pad")
def _pad(p: Any, eqn, ins):
    k, value = ins
    if value is not None:
        raise CoupleError("pads with a row-dependent value")
    if k is not None and tuple(eqn.params["padding_config"][k]) != (0, 0, 0):
        raise CoupleError("pads the row axis")
    return [k]


@rule("slice")
def _slice(p: Any, eqn, ins):
    (k,) = ins
    if k is None:
        return [None]
    start, limit = eqn.params["start_indices"][k], eqn.params["limit_indices"][k]
    stride = (eqn.params.get("strides") or (1,) * (k + 1))[k]
    if start != 0 or not p.is_batch(limit) or stride != 1:
        raise CoupleError("slices the row axis")
    return [k]


@rule("dynamic_slice")
def _dynamic_slice(p: Any, eqn, ins):
    k = ins[0]
    if any(s is not None for s in ins[1:]):
        raise CoupleError("starts at a row-dependent index")
    if k is not None and not p.is_batch(eqn.params["slice_sizes"][k]):
        raise CoupleError("slices the row axis")
    return [k]


@rule("dynamic_update_slice")
def _dynamic_update_slice(p: Any, eqn, ins):
    k, ku = ins[0], ins[1]
    if any(s is not None for s in ins[2:]):
        raise CoupleError("writes at a row-dependent index")
    if k is None and ku is None:
        return [None]
    if k is None or ku != k or not p.is_batch(_shape(eqn.invars[1])[k]):
        raise CoupleError("writes part of the row axis")
    return [k]


@rule("iota")
def _iota(p: Any, eqn, ins):
    shape = _shape(eqn.outvars[0])
    at = [i for i, d in enumerate(shape) if p.is_batch(d)]
    if not at:
        return [None]
    if len(at) == 1 and at[0] != eqn.params["dimension"]:
        return [at[0]]
    raise CoupleError("counts along the row axis (row positions)")


@rule("dot_general")
def _dot_general(p: Any, eqn, ins):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    kl, kr = ins
    lrank, rrank = len(_shape(eqn.invars[0])), len(_shape(eqn.invars[1]))
    lfree = [d for d in range(lrank) if d not in lc and d not in lb]
    rfree = [d for d in range(rrank) if d not in rc and d not in rb]
    if kl is None and kr is None:
        return [None]
    if kl is not None and kr is not None:
        if kl in lb and kr in rb and tuple(lb).index(kl) == tuple(rb).index(kr):
            return [tuple(lb).index(kl)]
        raise CoupleError("multiplies rows with other rows")
    if kl is not None:
        if kl not in lfree:
            raise CoupleError("contracts the row axis")
        return [len(lb) + lfree.index(kl)]
    if kr not in rfree:
        raise CoupleError("contracts the row axis")
    return [len(lb) + len(lfree) + rfree.index(kr)]


@rule("conv_general_dilated")
def _conv(p: Any, eqn, ins):
    kl, kr = ins
    if kl is None and kr is None:
        return [None]
    dn = eqn.params["dimension_numbers"]
    if kr is not None or eqn.params.get("batch_group_count", 1) != 1 or kl != dn.lhs_spec[0]:
        raise CoupleError("convolves along the row axis")
    return [dn.out_spec[0]]


@rule("gather")
def _gather(p: Any, eqn, ins):
    so, si = ins
    dn = eqn.params["dimension_numbers"]
    op_rank, idx_rank = len(_shape(eqn.invars[0])), len(_shape(eqn.invars[1]))
    out_rank = len(_shape(eqn.outvars[0]))
    batch_out = [d for d in range(out_rank) if d not in dn.offset_dims]  # the indices' axes but the last
    if so is None and si is None:
        return [None]
    if si is not None and si >= idx_rank - 1:
        raise CoupleError("reads indices across the row axis")
    if so is None:  # a lookup in a row-free table by each row's indices
        return [batch_out[si]]
    if si is None:  # whole rows kept, indices row-free
        if so in dn.start_index_map or so in dn.collapsed_slice_dims or so in dn.operand_batching_dims \
                or not p.is_batch(eqn.params["slice_sizes"][so]):
            raise CoupleError("selects along the row axis")
        kept = [d for d in range(op_rank) if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
        return [dn.offset_dims[kept.index(so)]]
    if so in dn.operand_batching_dims:  # per-row indices into the same row
        j = tuple(dn.operand_batching_dims).index(so)
        if dn.start_indices_batching_dims[j] == si:
            return [batch_out[si]]
    raise CoupleError("selects along the row axis")


@rule(*_SCATTERS.split())
def _scatter(p: Any, eqn, ins):
    so, si, su = ins[:3]
    dn = eqn.params["dimension_numbers"]
    op_rank, idx_rank = len(_shape(eqn.invars[0])), len(_shape(eqn.invars[1]))
    upd_rank = len(_shape(eqn.invars[2]))
    if so is None and si is None and su is None:
        return [None]
    if so is None:
        raise CoupleError("writes rows into a row-free array")
    if si is None:  # whole rows written, indices row-free
        window = [d for d in range(op_rank) if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
        if so in dn.scatter_dims_to_operand_dims or so not in window:
            raise CoupleError("writes along the row axis")
        ku = dn.update_window_dims[window.index(so)]
        if su == ku and p.is_batch(_shape(eqn.invars[2])[ku]):
            return [so]
        raise CoupleError("writes part of the row axis")
    if si < idx_rank - 1 and so in dn.operand_batching_dims:  # per-row indices into the same row
        j = tuple(dn.operand_batching_dims).index(so)
        scatter_dims = [d for d in range(upd_rank) if d not in dn.update_window_dims]
        if dn.scatter_indices_batching_dims[j] == si and su == scatter_dims[si]:
            return [so]
    raise CoupleError("writes along the row axis")


# -- sub-programs ------------------------------------------------------------------------------------------

@rule(*_CALLS)
def _call(p: Any, eqn, ins):
    sub = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    jaxpr = getattr(sub, "jaxpr", sub)
    if jaxpr is None or len(jaxpr.invars) != len(ins):
        raise CoupleError("has a sub-program the analysis cannot pair with its operands")
    return p.run_closed(sub, ins)


def _join(a: list, b: list, what: str) -> list:
    out = []
    for x, y in zip(a, b, strict=True):
        if isinstance(x, Coupled):
            out.append(x)
        elif isinstance(y, Coupled) or x == y:
            out.append(y)
        else:
            out.append(Coupled(f"{what}: a value is {x} on one path and {y} on another"))
    return out


@rule("cond")
def _cond(p: Any, eqn, ins):
    if ins[0] is not None:
        raise CoupleError("picks a branch from the rows")
    results = [p.run_closed(branch, ins[1:]) for branch in eqn.params["branches"]]
    out = results[0]
    for other in results[1:]:
        out = _join(out, other, "cond")
    return out


@rule("while")
def _while(p: Any, eqn, ins):
    nc, nb = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    cconsts, bconsts, carry = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    for _ in range(len(carry) + 2):  # states only rise (row-free < row axis < coupled): a fixed point is near
        (pred,) = p.run_closed(eqn.params["cond_jaxpr"], cconsts + carry)
        if pred is not None:
            raise CoupleError("stops on a row-dependent condition")
        new = _join(carry, p.run_closed(eqn.params["body_jaxpr"], bconsts + carry), "while loop carry")
        if new == carry:
            return carry
        carry = new
    raise CoupleError("loop carry has no stable row axis")


@rule("scan")
def _scan(p: Any, eqn, ins):
    from xlakit._jax.symbolic import is_symbolic

    if is_symbolic(eqn.params["length"]):
        raise CoupleError("loops once per row")
    n_consts, n_carry = eqn.params["num_consts"], eqn.params["num_carry"]
    consts, carry, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    if 0 in xs:
        raise CoupleError("scans over the row axis")
    x_states = [None if s is None else s - 1 for s in xs]
    for _ in range(len(carry) + 2):
        outs = p.run_closed(eqn.params["jaxpr"], consts + carry + x_states)
        new = _join(carry, outs[:n_carry], "scan carry")
        if new == carry:
            return carry + [s + 1 if isinstance(s, int) else s for s in outs[n_carry:]]
        carry = new
    raise CoupleError("loop carry has no stable row axis")
