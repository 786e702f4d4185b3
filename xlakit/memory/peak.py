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

from xlakit._jax.call_options import DEFAULT
from xlakit.memory._display import fmt_bytes, html_table
from xlakit.memory._grouping import GROUPS, UNKNOWN_LABELS, group_frame, group_text, grouped, role_note, top_groups
from xlakit.memory._hlo_frames import parse_op_name

__all__ = ["Peak", "peak", "peak_of", "group_frame", "top_groups", "PEAK_COLUMNS", "GROUPS", "UNKNOWN_LABELS"]

PEAK_COLUMNS = ["bytes", "role", "scope", "source", "layer", "block", "shape", "dtype", "instruction", "parameter",
                "output", "buffer_id", "allocation", "start", "end", "buffer_bytes"]


def _charge(live: Any) -> list[int]:
    """Bytes of each live buffer by the charging rule of :mod:`xlakit.memory._charging` (each byte once, to the
    buffer that ranks first among those sharing it: an aliased result, then the larger), so the charges sum to
    the bytes occupied; the rule of the per-role liveness too."""
    return _charge_rows(live, None).tolist()


def _charge_rows(frame: Any, rows: Any) -> Any:
    """:func:`_charge` of the rows ``rows`` (positions; None: all) of ``frame``, as an int64 array, read from its
    columns: the rows are not taken out as a frame of their own first."""
    import numpy as np

    from xlakit.memory._role_liveness import TAKES_OVER, charge

    sizes = frame["bytes"].to_numpy(dtype=np.int64)
    allocs = frame["allocation"].astype("Int64").to_numpy(dtype=np.int64, na_value=-1)
    offset = frame["offset"].astype("Int64")
    offsets, has_offset = offset.to_numpy(dtype=np.int64, na_value=0), offset.notna().to_numpy()
    if rows is not None:
        sizes, allocs, offsets, has_offset = sizes[rows], allocs[rows], offsets[rows], has_offset[rows]
    placed = (allocs >= 0) & has_offset & (sizes > 0)
    _, where, counts = np.unique(allocs[placed], return_inverse=True, return_counts=True)
    shared = np.zeros(len(sizes), dtype=bool)
    shared[np.flatnonzero(placed)] = counts[where] > 1
    out = sizes.copy()  # a buffer alone in its allocation is charged in full
    if shared.any():  # the others share their allocation (so are placed: no None among them): the rule decides
        at = np.flatnonzero(shared)
        if "role" in frame.columns:
            roles = frame["role"].to_numpy()
            first = [r in TAKES_OVER for r in (roles if rows is None else roles[rows])[at].tolist()]
        else:
            first = [False] * len(at)
        out[shared] = charge(sizes[at].tolist(), allocs[at].tolist(), offsets[at].tolist(), first)
    return out


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
        ``"layer"``, ``"block"``, ``"instruction"`` or ``"output"``: a DataFrame with columns group, bytes (int), count,
        share (of :attr:`total_bytes`), largest first; bytes sum to :attr:`total_bytes` (a donated argument's bytes
        under ``aliased`` once its result is written; the program's donations: ``attribution.donations``). Shown
        with readable bytes; the entry arguments of a ``source`` grouping are one "arguments" row and buffers
        without a value read what they are (``"(not an argument: values the program makes)"``); ``.raw`` has every
        group unfolded (groups of 0 B, whose buffers share bytes charged to another group, only there).

        Raises:
          ValueError: an unknown column.
        """
        return grouped(self.buffers, column, "bytes", total=self.total_bytes,
                       zero_note="their buffers share bytes charged to another group")

    def __repr__(self) -> str:
        return (f"peak {fmt_bytes(self.total_bytes)} at step {self.step} of {self.steps} ({self.where}): "
                f"{self._summary_by_role()}")

    def _summary_by_role(self) -> str:
        """The three largest groups by source line (arguments folded into one), each with the role holding
        most of it: :func:`~xlakit.memory._grouping.top_groups`, which the chart captions read too."""
        if self.buffers.empty:
            return "nothing live"
        tops = top_groups(self.buffers, "source", 4)
        shown = ", ".join(group_text(g) for g in tops[:3] if g["bytes"])
        return shown + (" …" if len(tops) > 3 else "")

    def _repr_html_(self) -> str:
        rows = [("peak", f"{fmt_bytes(self.total_bytes)} at step {self.step} of {self.steps} (the program's "
                         "instructions in the order XLA runs them)"),
                ("where", self.where)]
        for g in top_groups(self.buffers, "source", 8):  # with the role holding each line's bytes, as the repr
            held = role_note(g)
            shown = f"{fmt_bytes(g['bytes'])} in {g['count']} buffer(s)"
            rows.append((g["group"], f"{shown}: {held}" if held else shown))
        rows.append(("XLA instruction at the peak", f"{self.instruction or '?'} (XLA's name for the operation "
                     "running at that step; \"where\" above is its line)"))
        rows.append(("how the step was found", self.method))
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
    import numpy as np

    mod = attribution.assignment._module
    name = attribution.liveness["instruction"].iat[step] if step < len(attribution.liveness) else None
    ins = None
    if mod is not None:  # the instruction at that step of the flattened schedule
        order = attribution.assignment._schedule_ranges()[0]
        ins = mod.instructions.get(order[step]) if step < len(order) else None
    phase = parse_op_name(ins.op_name).phase if ins is not None else ""
    # The user's line and call of the instruction, from the buffers it defines: "backward of Block.__call__ ›
    # self.attn(x), model.py:13"; XLA's own name for the instruction stays out (Peak.instruction has it).
    b = attribution.buffers
    rows = np.flatnonzero(b["instruction"].to_numpy() == name)  # positions: no frame of the rows is made
    rows = rows[b["layer"].to_numpy()[rows] != "unknown"]
    layer = str(b["layer"].iat[rows[0]]) if len(rows) else ""
    line = str(b["source"].iat[rows[0]]).split(" (", 1)[0] if len(rows) else ""
    what = f"{layer}, {line}" if layer and line and layer != "argument" else layer
    if phase and what:
        return f"{phase} of {what}"
    return phase or what or "an instruction XLA added (no source line)"


def peak_of(attribution: Any) -> Peak:
    """The :class:`Peak` of an :class:`~xlakit.memory.Attribution`."""
    import numpy as np
    import pandas as pd

    live = attribution.liveness
    if live.empty:
        raise ValueError(f"{attribution.name or 'this program'} has no program steps to find a peak in")
    reserved = _reserved_for_the_run(attribution)
    if reserved is not None:
        return reserved
    step = _trace_step(attribution)
    method = "step of XLA's heap simulator trace peak" if step is not None else (
        "the step where the most bytes are live, replaying the program's instructions in the order XLA runs them "
        "(its HLO schedule) with each buffer's first and last use")
    if step is None:
        step = int(live.loc[live["live_bytes"].idxmax(), "step"])
    b = attribution.buffers
    first, last = b["start"].to_numpy(), b["end"].to_numpy()
    rows = np.flatnonzero((first >= 0) & (first <= step) & (last >= step))
    if len(rows):
        charged = _charge_rows(b, rows)
        own = b["bytes"].to_numpy()[rows]
        order = np.lexsort((-own, -charged))  # largest charge first, then largest buffer; ties keep their order
        at = b[PEAK_COLUMNS[1:-1]].take(rows[order]).reset_index(drop=True)
        at.insert(0, "bytes", charged[order])
        at["buffer_bytes"] = own[order]
    else:
        at = b.iloc[:0].assign(buffer_bytes=b["bytes"].iloc[:0], bytes=[])
        at = pd.DataFrame(at[PEAK_COLUMNS]).reset_index(drop=True)
    row = np.flatnonzero(live["step"].to_numpy() == step)[0]  # the step's row (by position, not by a mask)
    return Peak(step=step, steps=attribution.steps, total_bytes=int(live["live_bytes"].iat[row]),
                instruction=live["instruction"].iat[row], where=_where(attribution, step),
                buffers=at, attribution=attribution, method=method)


#: The label of the part of a reserved scratch region not live in program order at the peak step.
REGION_REST = "scratch region beyond the values live here"


def _reserved_for_the_run(attribution: Any) -> Peak | None:
    """The peak where the device holds a run's allocations for the whole run (TPU: ``scratch_in_reserved_region``
    in :mod:`xlakit._jax.platforms`), else None.

    There the device holds the arguments, outputs and constants from the start of a run to its end, plus one
    scratch region for all its temporaries (:mod:`xlakit.memory._scratch_region`: the assignment's device
    temporary allocation rounded up to the allocator's granule, none where ``temp_size_in_bytes`` is 0) — what the
    chip's allocator showed to the byte on a TPU v5e. The total is that sum; XLA's ``peak_memory_in_bytes`` is
    named in ``method`` where it differs (it is not what the chip holds: 3.7x the region-based figure for a small
    transformer step). The step shown is the one where the most temporaries are live in program order (the lines
    that fill the region), the last step without a region; what the region holds beyond the temporaries live at
    that step (values XLA keeps longer, packing) is one row, :data:`REGION_REST`."""
    import pandas as pd

    from xlakit._jax.platforms import rules
    from xlakit.memory._scratch_region import region_temp

    rule = rules(attribution.platform)
    if not rule.scratch_in_reserved_region:
        return None
    temp, source = region_temp(getattr(attribution.memory, "temp_bytes", None),
                               attribution.assignment.totals().get("temp_bytes"))
    if temp is None:
        return None
    region = rule.reserved_bytes(temp)
    live = attribution.liveness
    scratch_roles = [c for c in ("residual", "recomputed", "temporary") if c in live.columns]
    if region and scratch_roles:
        step = int(live.loc[live[scratch_roles].sum(axis=1).idxmax(), "step"])
    else:
        step = int(live["step"].iat[-1])
    b = attribution.buffers
    allocations = attribution.assignment.allocations
    on_host = b["allocation"].isin([a.index for a in allocations if a.memory_space == "host"])  # not the chip's
    in_temps = b["allocation"].isin([a.index for a in allocations if a.kind == "temporary"]) & ~on_host
    whole_run = _held_for_the_run(b) & ~in_temps & ~on_host
    in_region = in_temps & (b["start"] >= 0) & (b["start"] <= step) & (b["end"] >= step) if region else False
    kept = whole_run | in_region
    at = b[kept].reset_index(drop=True)
    at = at.assign(buffer_bytes=at["bytes"], bytes=_charge(at) if len(at) else [])
    rest = region - int(at["bytes"][in_temps[kept].to_numpy()].sum()) if len(at) else region
    if rest > 0:
        filler = {c: None for c in PEAK_COLUMNS} | {"bytes": rest, "buffer_bytes": rest, "role": "temporary",
                                                    "scope": REGION_REST, "source": REGION_REST, "layer": "unknown"}
        at = pd.concat([at, pd.DataFrame([filler])], ignore_index=True)
    at = pd.DataFrame(at[PEAK_COLUMNS].sort_values(["bytes", "buffer_bytes"], ascending=False, kind="stable"))
    total = int(at["bytes"].sum())
    xla_peak = getattr(attribution.memory, "peak_bytes", None)
    differs = (f"; XLA's peak_memory_in_bytes ({xla_peak:,} B) differs and is not what the chip's allocator holds"
               if isinstance(xla_peak, int) and xla_peak != total else "")
    held_text = "arguments, outputs and constants in device memory, held for the whole run"
    if region:
        region_text = (f" + the scratch region reserved for the run, {region:,} B ({source}, rounded up to the "
                       f"allocator's {fmt_bytes(rule.reservation_granule)}); the step is where the most temporaries "
                       f"are live in program order, and the row \"{REGION_REST}\" is the rest of the region there")
    elif getattr(attribution.memory, "temp_bytes", None) == 0:
        region_text = ("; no scratch region, as XLA's temp_size_in_bytes is 0: its temporaries stay in on-chip "
                       "memory (one such program of five measured reserved 115,712 B all the same)")
    else:
        region_text = "; no scratch region: the buffer assignment lists no device temporaries"
    return Peak(step=step, steps=attribution.steps, total_bytes=total,
                instruction=live.loc[live["step"] == step, "instruction"].iat[0], where=_where(attribution, step),
                buffers=at.reset_index(drop=True), attribution=attribution,
                method=f"{held_text}{region_text}, as the chip's allocator showed on a TPU v5e{differs}")


def _held_for_the_run(b: Any) -> Any:
    """Mask of the buffers a TPU holds from a run's start to its end: arguments, outputs and constants."""
    return b["role"].isin(["parameter", "optimizer state", "aliased", "output", "constant"]) & (b["start"] >= 0)


def peak(x: Any, /, *args: Any, cache: Any = DEFAULT, **kwargs: Any) -> Peak:
    """Where a compiled program's live bytes peak, and what holds them.

    Args:
      x, *args, **kwargs, cache: as for :func:`xlakit.memory.attribute` (a ``Compiled``, a function and its
        example arguments — every keyword but ``cache`` is the function's —, a cache entry with ``cache=``, a
        bundle with ``batch=``) — or an :class:`~xlakit.memory.Attribution` already made (alone). ``x`` is
        positional only, ``cache`` keyword only.

    Returns:
      :class:`Peak`: ``step``, ``total_bytes`` (bytes), ``buffers`` live there, ``by(...)`` grouping.

    Raises:
      TypeError / ValueError: as :func:`~xlakit.memory.attribute` (``cache=`` for a function that takes a
      ``cache`` argument itself included), TypeError for arguments given with an ``Attribution``; ValueError
      for a program with no steps.
    """
    from xlakit.memory._decoding import without_gc
    from xlakit.memory.attribution import Attribution, attribute_program

    if isinstance(x, Attribution) and (args or kwargs or cache is not DEFAULT):
        raise TypeError("peak() of an Attribution takes nothing else: its program is already attributed")

    def run() -> Peak:
        attribution = x if isinstance(x, Attribution) else attribute_program("peak", x, args, kwargs, cache)
        return peak_of(attribution)

    return without_gc(run)
