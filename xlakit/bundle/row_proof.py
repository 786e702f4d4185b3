"""A proof, over the jaxpr traced with a symbolic batch axis, that padding and chunking never change an answer.

A loaded bundle may run ``n`` rows through the program for ``B > n`` rows (padding) or split them into chunks.
Both are exact when the program is *row-wise*: there is one function ``g`` such that for every batch size
``b`` and every row ``i``, batched output row ``i`` is ``g(input row i, weights)``, and every non-batched
output is a function of the weights alone. The analysis proves this for the symbolic batch size ``batch``,
hence for every size.

Each variable of the jaxpr gets a *row state*: ``None`` (row-free: computed from weights and constants only,
no symbolic dimension in its shape), an axis ``k`` (row-wise: its shape has ``batch`` at axis ``k`` only, and
its slice ``k = i`` is the same function of input row ``i`` for every ``i`` and every size), or
:class:`Coupled` with the reason (the primitive and the user's source line). Inputs are row-wise on axis 0,
weights row-free; each primitive maps its operands' states to its results' with a rule
(:mod:`xlakit.bundle.row_rules`); a primitive without a rule couples whatever it touches. Anything that reads
across rows (a reduction, cumulative op, sort, slice, pad, reverse or gather along the row axis), reads the
row *position* (``iota`` along it) or the batch *size* (``dim_as_value``, a loop of ``batch`` steps) is coupled.
Batched outputs must end row-wise on axis 0, the others row-free.

No compile and no device: the analysis reads the jaxpr only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xlakit.bundle.row_rules import RULES, Coupled, CoupleError, has_subprogram, mentions_symbolic

__all__ = ["Coupled", "CoupleError", "RowVerdict", "Proof", "prove_rows"]


@dataclass(frozen=True)
class RowVerdict:
    """``proven``: every batched output is row-wise on axis 0 and every other output row-free, for every
    batch size. ``reason``: what couples rows (primitive and source line), or what was proven."""

    proven: bool
    reason: str


def prove_rows(closed_jaxpr: Any, n_weights: int, batched: Sequence[bool]) -> RowVerdict:
    """Prove ``closed_jaxpr`` row-wise (see the module docstring).

    Args:
      closed_jaxpr: ``jax.make_jaxpr(bundle_fn)(weight_avals, *input_avals)`` with axis 0 of every input the
        symbolic batch dimension (``jax.export.symbolic_shape("batch")``).
      n_weights: how many leading inputs are weights (row-free).
      batched: per output, whether it is batched (its axis 0 follows the batch size).

    Never raises: an unexpected jaxpr is "not proven" with the reason.
    """
    try:
        jaxpr = closed_jaxpr.jaxpr
        inputs = jaxpr.invars[n_weights:]
        if not inputs:
            return RowVerdict(False, "the program has no batched input")
        batch = inputs[0].aval.shape[0]
        from xlakit._jax.symbolic import is_symbolic

        if not is_symbolic(batch):
            return RowVerdict(False, "the batch axis is not symbolic")
        proof = Proof(batch)
        states = [None] * n_weights + [0] * len(inputs)
        outs = proof.run(jaxpr, states, [None] * len(jaxpr.constvars))
    except Exception as e:  # noqa: BLE001 - an unknown jaxpr form: not proven
        return RowVerdict(False, f"the analysis could not read the program ({type(e).__name__}: {e})")
    if len(outs) != len(batched):
        return RowVerdict(False, f"{len(outs)} results, {len(batched)} outputs expected")
    for i, (state, want) in enumerate(zip(outs, batched, strict=True)):
        if isinstance(state, Coupled):
            return RowVerdict(False, f"output {i}: {state.reason}")
        if want and state != 0:
            return RowVerdict(False, f"output {i} is batched but its rows are not its axis 0 (row axis {state})")
        if not want and state is not None:
            return RowVerdict(False, f"output {i} is not batched but depends on the rows")
    return RowVerdict(True, f"proven for every batch size: {proof.count} equations, each row-wise")


class Proof:
    """Row states through one jaxpr and its sub-jaxprs (``batch``: the symbolic batch dimension)."""

    def __init__(self, batch: Any) -> None:
        self.batch = batch
        self.count = 0
        self.outer: list[Any] = []  # enclosing equations (a jnp function's jit): their lines name the user's code

    def is_batch(self, d: Any) -> bool:
        from xlakit._jax.symbolic import is_symbolic

        return is_symbolic(d) and d == self.batch

    def run(self, jaxpr: Any, in_states: Sequence[Any], const_states: Sequence[Any] | None = None) -> list[Any]:
        """Result states of the open ``jaxpr`` for its inputs' states (constants row-free by default)."""
        from jax.extend.core import Literal

        env: dict[Any, Any] = {}
        consts = list(const_states) if const_states is not None else [None] * len(jaxpr.constvars)
        for v, s in zip(jaxpr.constvars, consts, strict=True):
            env[v] = s
        for v, s in zip(jaxpr.invars, in_states, strict=True):
            env[v] = s

        def read(x):
            return None if isinstance(x, Literal) else env[x]

        for eqn in jaxpr.eqns:
            self.count += 1
            outs = self.eqn(eqn, [read(x) for x in eqn.invars])
            for v, s in zip(eqn.outvars, outs, strict=True):
                env[v] = s
        return [read(v) for v in jaxpr.outvars]

    def run_closed(self, closed: Any, in_states: Sequence[Any]) -> list[Any]:
        jaxpr = getattr(closed, "jaxpr", closed)
        return self.run(jaxpr, in_states)

    def eqn(self, eqn: Any, ins: list[Any]) -> list[Any]:
        """The result states of one equation, each checked against its shape."""
        name = eqn.primitive.name
        n = len(eqn.outvars)
        for s in ins:
            if isinstance(s, Coupled):
                return [s] * n
        rule = RULES.get(name)
        try:
            if name == "dim_as_value":
                raise CoupleError("uses the batch size as a value")
            if rule is not None:
                self.outer.append(eqn)
                try:
                    outs = list(rule(self, eqn, ins))
                finally:
                    self.outer.pop()
            elif all(s is None for s in ins) and not has_subprogram(eqn) and not mentions_symbolic(eqn.params):
                outs = [None] * n
            else:
                raise CoupleError("has no row rule")
        except CoupleError as e:
            return [Coupled(f"{name} {e} ({self.where(eqn)})")] * n
        return [self.checked(s, v.aval, eqn) for s, v in zip(outs, eqn.outvars, strict=True)]

    def checked(self, state: Any, aval: Any, eqn: Any) -> Any:
        """``state`` if the result's shape has the batch dimension exactly at the row axis (and nowhere for a
        row-free value), else :class:`Coupled`."""
        from xlakit._jax.symbolic import is_symbolic

        if isinstance(state, Coupled):
            return state
        shape = tuple(getattr(aval, "shape", ()))
        symbolic = [i for i, d in enumerate(shape) if is_symbolic(d)]
        if state is None and not symbolic:
            return None
        if isinstance(state, int) and symbolic == [state] and self.is_batch(shape[state]):
            return state
        what = "row-free" if state is None else f"row axis {state}"
        return Coupled(f"{eqn.primitive.name} gives shape {shape} for a {what} value ({self.where(eqn)})")

    def where(self, eqn: Any) -> str:
        for e in [eqn, *reversed(self.outer)]:
            line = where(e)
            if line != "line unknown":
                return line
        return "line unknown"


def where(eqn: Any) -> str:
    """The first user source line of ``eqn`` (``file:line``), or ``"line unknown"``."""
    from xlakit._sources import Frame, describe, first_user_frame

    try:
        frames = [Frame(f.file_name, f.line_num, f.function_name) for f in eqn.source_info.traceback.frames]
    except Exception:  # noqa: BLE001 - no traceback recorded
        return "line unknown"
    frame = first_user_frame(frames)
    return describe(frame) if frame is not None else "line unknown"
