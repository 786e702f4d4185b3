"""The peak of a compiled program, explained: the program step where live bytes are highest, and the buffers
live there in the user's terms (line, layer, parameter, role) — jax-ml/jax#8096's "arrays resident at the
peak", for a program before it runs.

Where the step comes from: XLA's heap simulator trace when the buffer assignment ships one (the event where
the traced allocation's live bytes peak, placed at its instruction's step); otherwise (jaxlib 0.10.2 CPU
ships none) the maximum of the liveness :func:`xlakit.memory.attribute` reconstructs from the module's
schedule. The total at that step counts every byte occupied once: buffers that share bytes in place (an
in-place update, a buffer reused after another one died) are charged to the largest of them, except that a
result written into a donated argument (role ``aliased``) takes the argument's bytes from the step it is
written — so ``by("role")`` shows donation as ``aliased`` bytes, not as an argument that stays and a result that
costs nothing — and the charges still sum to the bytes occupied.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from xlakit.memory._display import fmt_bytes, html_table
from xlakit.memory._grouping import GROUPS, group_frame
from xlakit.memory._hlo_frames import parse_op_name

__all__ = ["Peak", "peak", "peak_of", "group_frame", "PEAK_COLUMNS", "GROUPS"]

PEAK_COLUMNS = ["bytes", "role", "scope", "source", "layer", "shape", "dtype", "instruction", "parameter",
                "output", "buffer_id", "allocation", "start", "end", "buffer_bytes"]
_PLURAL = {"parameter": "parameters", "residual": "residuals", "temporary": "temporaries", "output": "outputs",
           "constant": "constants", "aliased": "aliased outputs", "recomputed": "recomputed values"}


def _charge(live: Any) -> list[int]:
    """Bytes of each live buffer by the charging rule of :mod:`xlakit.memory._charging` (each byte once, to the
    buffer that ranks first among those sharing it: an aliased result, then the larger), so the charges sum to
    the bytes occupied; the rule of the per-role liveness too."""
    from xlakit.memory._role_liveness import TAKES_OVER, charge, nullable_ints

    roles = live["role"] if "role" in live.columns else [None] * len(live)
    return charge([int(v) for v in live["bytes"]], nullable_ints(live["allocation"]), nullable_ints(live["offset"]),
                  [r in TAKES_OVER for r in roles])


@dataclasses.dataclass(frozen=True)
class Peak:
    """The peak of one compiled program.

    Attributes:
      step: the program step (0-based, XLA's order) where live bytes peak. steps: number of steps.
      total_bytes: bytes occupied at that step (arguments, outputs, temporaries, constants; shared bytes once).
      instruction: the HLO instruction at that step; where: its phase and user function
        (``"backward of MLP.__call__"``, ``"unknown"`` without metadata).
      buffers: ``pandas.DataFrame`` of the logical buffers live at the step, columns :data:`PEAK_COLUMNS`,
        largest first: bytes (charged at the peak by the rule above; sums to ``total_bytes``), buffer_bytes
        (the buffer's own size), role, scope, source, layer, shape, dtype, instruction, parameter, output
        (an aliased result: ``parameter`` is the donated argument, ``output`` the result it became), ...
      attribution: the :class:`~xlakit.memory.Attribution` it was read from. method: where the step came from.
    """

    step: int
    steps: int
    total_bytes: int
    instruction: str | None
    where: str
    buffers: Any
    attribution: Any = dataclasses.field(repr=False)
    method: str = ""

    def by(self, column: str = "source"):
        """The live bytes at the peak grouped by ``"source"``, ``"scope"``, ``"role"``, ``"parameter"``,
        ``"layer"``, ``"instruction"`` or ``"output"``: DataFrame group, bytes, count, sorted by bytes descending;
        bytes sum to :attr:`total_bytes` (a donated argument's bytes under ``aliased`` once its result is
        written; the program's donations: ``attribution.donations``).

        Raises:
          ValueError: an unknown column.
        """
        return group_frame(self.buffers, column, "bytes")

    def __repr__(self) -> str:
        return (f"peak {fmt_bytes(self.total_bytes)} at step {self.step} of {self.steps} ({self.where}): "
                f"{self._summary_by_role()}")

    def _summary_by_role(self) -> str:
        # Arguments, optimizer state and the results written into donated arguments are summed per role (one
        # line each), the rest named by source.
        b = self.buffers
        if b.empty:
            return "nothing live"
        summed = ["parameter", "optimizer state", "aliased"]
        args = b[b["role"].isin(summed)]
        rest = b[~b["role"].isin(summed)]
        parts = [(int(g["bytes"].sum()), f"{_PLURAL.get(r, r)}") for r, g in args.groupby("role")]
        groups = rest.groupby(["role", "source"], sort=False)["bytes"].sum()
        parts += [(int(v), f"{_PLURAL.get(r, r)} from {s}") for (r, s), v in groups.items()]
        parts.sort(key=lambda p: -p[0])
        shown = ", ".join(f"{fmt_bytes(v)} {text}" for v, text in parts[:3] if v)
        return shown + (" …" if len(parts) > 3 else "")

    def _repr_html_(self) -> str:
        rows = [("peak", f"{fmt_bytes(self.total_bytes)} at step {self.step} of {self.steps}"),
                ("where", f"{self.where} ({self.instruction or '?'})")]
        for _, r in self.by("source").head(8).iterrows():
            rows.append((str(r["group"]), f"{fmt_bytes(int(r['bytes']))} in {int(r['count'])} buffer(s)"))
        rows.append(("method", self.method))
        return html_table(rows, title=f"Peak of {self.attribution.name or '?'}")


def _trace_step(attribution: Any) -> int | None:
    """The schedule step of the heap simulator trace's highest event, or None without a usable trace."""
    ba = attribution.assignment
    if not ba.heap_traces:
        return None
    try:
        frame = ba.live_bytes_by_step()
    except ValueError:
        return None
    if frame.empty:
        return None
    top = frame.loc[frame["live_bytes"].idxmax(), "instruction"]
    steps = attribution.liveness.index[attribution.liveness["instruction"] == top]
    return int(attribution.liveness.loc[steps[0], "step"]) if len(steps) else None


def _where(attribution: Any, step: int) -> str:
    mod = attribution.assignment._module
    name = attribution.liveness["instruction"].iat[step] if step < len(attribution.liveness) else None
    ins = None
    if mod is not None:  # the instruction at that step of the flattened schedule
        order = attribution.assignment._schedule_ranges()[0]
        ins = mod.instructions.get(order[step]) if step < len(order) else None
    phase = parse_op_name(ins.op_name).phase if ins is not None else ""
    # The user function of the instruction's first user frame, from the buffers it defines.
    b = attribution.buffers
    rows = b[(b["instruction"] == name) & (b["layer"] != "unknown")]
    fn = str(rows["layer"].iat[0]).split(" › ")[0] if len(rows) else ""
    if phase and fn:
        return f"{phase} of {fn}"
    return phase or fn or "unknown"


def peak_of(attribution: Any) -> Peak:
    """The :class:`Peak` of an :class:`~xlakit.memory.Attribution`."""
    import pandas as pd

    live = attribution.liveness
    if live.empty:
        raise ValueError(f"{attribution.name or 'this program'} has no program steps to find a peak in")
    step = _trace_step(attribution)
    method = "step of XLA's heap simulator trace peak" if step is not None else (
        "maximum of the liveness reconstructed from the HLO schedule")
    if step is None:
        step = int(live.loc[live["live_bytes"].idxmax(), "step"])
    b = attribution.buffers
    at = b[(b["start"] >= 0) & (b["start"] <= step) & (b["end"] >= step)].reset_index(drop=True)
    at = at.assign(buffer_bytes=at["bytes"], bytes=_charge(at) if len(at) else [])
    at = at[PEAK_COLUMNS].sort_values(["bytes", "buffer_bytes"], ascending=False, kind="stable")
    at = pd.DataFrame(at).reset_index(drop=True)
    total = int(live.loc[live["step"] == step, "live_bytes"].iat[0])
    return Peak(step=step, steps=attribution.steps, total_bytes=total,
                instruction=live.loc[live["step"] == step, "instruction"].iat[0], where=_where(attribution, step),
                buffers=at, attribution=attribution, method=method)


def peak(x: Any, *args: Any, cache: Any = None, **kwargs: Any) -> Peak:
    """Where a compiled program's live bytes peak, and what holds them.

    Args:
      x, *args, **kwargs, cache: as for :func:`xlakit.memory.attribute` (a ``Compiled``, a function and its
        example arguments, a cache entry with ``cache=``, a bundle with ``batch=``) — or an
        :class:`~xlakit.memory.Attribution` already made.

    Returns:
      :class:`Peak`: ``step``, ``total_bytes`` (bytes), ``buffers`` live there, ``by(...)`` grouping.

    Raises:
      TypeError / ValueError: as :func:`~xlakit.memory.attribute`; ValueError for a program with no steps.
    """
    from xlakit.memory._decoding import without_gc
    from xlakit.memory.attribution import Attribution, attribute

    def run() -> Peak:
        attribution = x if isinstance(x, Attribution) else attribute(x, *args, cache=cache, **kwargs)
        return peak_of(attribution)

    return without_gc(run)
