"""What a change did to memory: two compiled programs (with and without donation, a remat policy, another
dtype or batch) diffed at their peaks by role, scope and source — "residuals −2.0 MiB (model.py:76),
temporaries +256 KiB" — not just two totals; and what donation changed, pair by pair — "donation: p['w1'] →
output['w1'] aliased, 2.0 MiB reused (one run occupies 6.0 MiB → 4.0 MiB)"."""

from __future__ import annotations

import dataclasses
from typing import Any

from xlakit.memory._display import fmt_bytes, html_table

__all__ = ["Comparison", "compare"]

_BY = ("role", "scope", "source")
_PLURAL = {"parameter": "parameters", "residual": "residuals", "temporary": "temporaries", "output": "outputs",
           "constant": "constants", "aliased": "aliased outputs", "recomputed": "recomputed values"}


def _change(a: int, b: int) -> str:
    """``"8.6 MiB → 4.0 MiB (−4.6 MiB)"``; each side with its bytes where both would read the same."""
    from xlakit._text.format import fmt_bytes_apart

    before, after = fmt_bytes_apart(a, b)
    return f"{before} → {after} ({_signed(b - a)})"


def _signed(n: int) -> str:
    return ("+" if n > 0 else "−" if n < 0 else "±") + fmt_bytes(abs(n))


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two programs' peaks side by side.

    Attributes:
      frame: ``pandas.DataFrame`` with columns by (``"role"``, ``"scope"`` or ``"source"``), group, bytes_a,
        bytes_b, delta (bytes_b - bytes_a): the bytes live at each program's peak, grouped three ways, sorted
        by ``by`` then by the size of the change.
      a, b: the two :class:`~xlakit.memory.Peak`\\ s. peak_delta: ``b.total_bytes - a.total_bytes``.
      why: a sentence on why the peak moved less than the residuals (remat whose recomputed values are all live
        at the new peak), or ``""``.
      footprint_a, footprint_b: bytes XLA reserves for one run (``CompiledMemory.footprint_bytes``; None
        when not reported).
      donations: which argument became which result in each program, and the bytes reused (what one run
        occupies, XLA's footprint, says what that saved).
    """

    frame: Any
    a: Any = dataclasses.field(repr=False)
    b: Any = dataclasses.field(repr=False)
    labels: tuple[str, str] = ("a", "b")  # what the title calls the two programs

    @property
    def peak_delta(self) -> int:
        return int(self.b.total_bytes - self.a.total_bytes)

    @property
    def footprint_a(self) -> int | None:
        return getattr(self.a.attribution.memory, "footprint_bytes", None)

    @property
    def footprint_b(self) -> int | None:
        return getattr(self.b.attribution.memory, "footprint_bytes", None)

    def by(self, column: str = "role"):
        """The rows of :attr:`frame` for one grouping (``"role"``, ``"scope"`` or ``"source"``)."""
        if column not in _BY:
            raise ValueError(f"compare groups by {', '.join(_BY)}; got {column!r}")
        return self.frame[self.frame["by"] == column].drop(columns="by").reset_index(drop=True)

    def _role_delta(self, role: str) -> tuple[int, int]:
        """(bytes at a's peak, bytes at b's peak) of one role."""
        rows = self.by("role")
        row = rows[rows["group"] == role]
        return (int(row["bytes_a"].iat[0]), int(row["bytes_b"].iat[0])) if len(row) else (0, 0)

    @property
    def why(self) -> str:
        """Sentences on why the peak moved less than the change suggests, read from the two peaks' roles and
        blocks; ``""`` when it moved as expected.

        * remat: residuals fell, recomputed values rose, and the peak fell by less than the residuals. When the
          recomputed values live at the new peak come from several blocks, it names them: XLA's schedule made
          them all before the backward pass used the first, and a loop (``lax.scan``) would not (measured on
          a 4-block flax.nnx transformer on CPU: per-block ``nnx.remat`` in a Python loop 90.1 MiB, as without
          remat; ``nnx.scan`` over the blocks with ``nnx.remat`` inside 36.2 MiB).
        * remat that recomputes nothing: the checkpointed program has no recomputed values and more residuals,
          and its peak rose — its policy saved them, or XLA merged the recomputation with the forward pass's own
          instructions (measured on CPU: ``tanh(h @ w)`` checkpointed kept ``h @ w`` for the backward pass beside
          ``tanh``'s result).
        * remat where no residual is live at either peak (a train step whose peak is its last step: arguments and
          new parameters): what fills the peak is nothing remat changes.
        * donation: results written into donated arguments reuse their bytes, but the peak fell by less: what one
          run occupies (the footprint, XLA's figure) says what that saved — nothing where XLA copies the argument
          first (a transpose, a roll) —, and those results may be made after the peak, and/or the peak
          holds more temporaries (XLA may copy an argument still read, or make a result apart and copy it into
          the donated bytes: it says how the copies changed)."""
        return " ".join(t for t in (self._remat_why(), self._donation_why()) if t)

    def _moved(self) -> str:
        return ("did not move" if self.peak_delta == 0 else f"rose by {fmt_bytes(self.peak_delta)}"
                if self.peak_delta > 0 else f"fell by only {fmt_bytes(-self.peak_delta)}")

    def _remat_why(self) -> str:
        res_a, res_b = self._role_delta("residual")
        rec_a, rec_b = self._role_delta("recomputed")
        saved, recomputed = res_a - res_b, rec_b - rec_a
        if saved < 0 and not rec_b and self.peak_delta > 0 and self._checkpointed(self.b):
            return (f"The peak {self._moved()}: no value is recomputed at its peak. The checkpointed backward pass "
                    f"reads values kept from the forward pass, {fmt_bytes(-saved)} more residuals than without the "
                    "checkpoint: its policy saves them, or XLA merged the recomputation with the forward pass's own "
                    "instructions. A checkpoint pays off around a block whose inner values outweigh its inputs and "
                    "outputs.")
        if not (res_a or res_b or rec_b) and self.peak_delta >= 0 and self._checkpointed(self.b):
            rows = self.by("role")
            held = ", ".join(f"{r} {fmt_bytes(int(b))}" for r, b in zip(rows["group"], rows["bytes_b"], strict=True)
                             if int(b) > 0)
            return (f"The peak {self._moved()}: no residual is live at either peak (it holds {held}), and remat "
                    "only changes what the forward pass keeps for the backward pass, live before this peak.")
        if saved <= 0 or recomputed <= 0 or -self.peak_delta >= saved:
            return ""
        together = (f"{fmt_bytes(recomputed)} of recomputed values are live at once where {fmt_bytes(saved)} of "
                    "residuals were")
        blocks = self._recomputed_blocks()
        if len(blocks) > 1:
            return (f"The peak {self._moved()}: XLA's schedule recomputes the checkpointed values of "
                    f"{', '.join(blocks)} before the backward pass uses the first of them, so {together}. A "
                    "checkpoint around the whole function or around each block (xlakit.memory.checkpoint_each) "
                    "leaves that order to XLA; a loop recomputes one block at a time: run the blocks with "
                    "jax.lax.scan (nnx.scan) over stacked parameters, the checkpoint inside the loop body.")
        return (f"The peak {self._moved()}: the backward pass recomputes the checkpointed values before it uses "
                f"them, all together, so {together} (a checkpoint around the whole function recomputes everything "
                "first; one around each block, xlakit.memory.checkpoint_each, recomputes a block at a time: compare "
                "it too, it does not always pay).")

    @staticmethod
    def _checkpointed(p: Any) -> bool:
        """Whether a buffer of ``p``'s program was made under ``jax.checkpoint`` (its op name's scope)."""
        scopes = p.attribution.buffers["scope"].dropna().astype(str)
        return bool(scopes.str.contains("checkpoint", regex=False).any())

    def _recomputed_blocks(self) -> list[str]:
        """The blocks (``blocks[2]``) whose recomputed values are live at b's peak, in order."""
        buffers = self.b.buffers
        if "block" not in buffers.columns:
            return []
        names = buffers.loc[(buffers["role"] == "recomputed") & (buffers["bytes"] > 0), "block"].dropna()
        names = [str(n) for n in names.unique() if str(n) and not str(n).startswith("all ")]
        return sorted(names, key=lambda n: (len(n), n))

    def _donation_why(self) -> str:
        saved = int(self.b.attribution.donations["bytes"].sum() - self.a.attribution.donations["bytes"].sum())
        if saved <= 0 or -self.peak_delta >= saved // 2:
            return ""
        head = f"Donation reuses {fmt_bytes(saved)}: results are written into their arguments' bytes{self._net()}."
        reasons = []
        outputs_a = self._role_delta("output")[0]
        if outputs_a < saved:  # the results donation saves are (mostly) made after the first program's peak
            made = ("none of them exists at the first program's peak" if not outputs_a else
                    f"at the first program's peak only {fmt_bytes(outputs_a)} of results exist")
            reasons.append(f"it comes before those results are made ({made}), so what donation saves is not at "
                           "the peak")
        temp_a, temp_b = self._role_delta("temporary")
        lines = self._copy_readers(self.b)
        copied = ("XLA keeps a donated argument's value apart from the result written into its buffer; the copies "
                  f"are read last {', '.join(_at(line) for line in lines)}") if lines else ""
        if temp_b > temp_a:  # the second schedule holds more scratch at its peak
            copies = self._copies(self.b) - self._copies(self.a)
            text = f"it holds {_exact(temp_b - temp_a)} more of temporaries"
            if copies:  # the two parts, exact: "copies +6 MiB" never reads against "temporaries +1.1 MiB"
                other = temp_b - temp_a - copies
                text += f": copies XLA makes of arguments {_exact(copies, signed=True)}" + (
                    f", other temporaries {_exact(other, signed=True)}" if other else "")
                text += f" — {copied}" if copied else ""
            reasons.append(text)
        elif copied:  # the peak did not grow, but copies still hold bytes donation reuses: why it saves less
            reasons.append(f"the donated program holds {fmt_bytes(self._copies(self.b))} of copies at its peak "
                           f"({copied})")
        return f"{head} The peak {self._moved()}" + (f": {'; and '.join(reasons)}." if reasons else ".")

    def _net(self) -> str:
        """What one run occupies before and after, XLA's figures (the footprint): what donation really saved, which
        is less than the bytes reused where XLA copies a donated argument before writing into it (a transpose, a
        roll: the copy is a temporary of the same size)."""
        fa, fb = self.footprint_a, self.footprint_b
        if fa is None or fb is None:
            return ""
        from xlakit._text.format import fmt_bytes_apart

        before, after = fmt_bytes_apart(fa, fb)
        if fb < fa:
            return f"; one run occupies {before} → {after} (the footprint): {fmt_bytes(fa - fb)} saved"
        return (f"; but one run occupies {before} → {after} (the footprint): XLA holds a copy among "
                "the temporaries where a result cannot be written in place or the argument is still read after, so "
                "nothing is saved")

    @staticmethod
    def _copies(p: Any) -> int:
        """Bytes of ``copy`` temporaries live at a peak (as the peak charges them)."""
        b, every = p.buffers, p.attribution.buffers
        copies = set(every.loc[every["opcode"] == "copy", "buffer_id"].tolist())
        return int(b.loc[(b["role"] == "temporary") & b["buffer_id"].isin(copies), "bytes"].sum())

    @staticmethod
    def _copy_readers(p: Any) -> list[str]:
        """The lines that read the copies of donated arguments live at a peak last (from their ``source``:
        :func:`xlakit.memory._speaking.copied_argument`), in order of first appearance, at most three."""
        b = p.buffers
        scope = b["scope"].astype(str)
        sources = b.loc[(b["role"] == "temporary") & scope.str.startswith("made by XLA › copy of a donated"), "source"]
        found = dict.fromkeys(str(s).split(" read last ", 1)[1].removeprefix("at ") for s in sources
                              if " read last " in str(s))  # "at LINE" or "by its own update at LINE"
        return list(found)[:3]

    @property
    def donations(self):
        """``pandas.DataFrame`` of both programs' donations (:attr:`xlakit.memory.Attribution.donations`) with a
        column ``program`` (``"a"`` / ``"b"``): which argument became which result, and the bytes reused."""
        import pandas as pd

        frames = [p.attribution.donations.assign(program=name) for name, p in (("a", self.a), ("b", self.b))]
        return pd.concat(frames, ignore_index=True)

    def summary(self, footprint: bool = True) -> str:
        """``"residuals −2.0 MiB (model.py:76 (loss)), temporaries +256.0 KiB"``: each role that changed, with
        the source whose change is largest within it; then what donation changed: ``"donation: p['w1'] →
        output['w1'] aliased, 2.0 MiB reused (one run occupies 6.0 MiB → 4.0 MiB)"``, the footprint being XLA's figure
        of what donation saved (see :func:`xlakit.memory._donation.donation_summary`); ``footprint=False`` leaves
        it out (``repr`` does where its explanation already gives it)."""
        from xlakit._text.format import fmt_bytes_apart
        from xlakit.memory._donation import donation_summary

        roles = self._roles_summary()
        donation = donation_summary(self.a.attribution.donations, self.b.attribution.donations)
        fa, fb = self.footprint_a, self.footprint_b
        if footprint and donation.startswith("donation:") and fa is not None and fb is not None:  # XLA's saving
            before, after = fmt_bytes_apart(fa, fb)
            donation += f" (one run occupies {before} → {after})"
        if donation:
            return f"{roles}; {donation}" if roles != "no change at the peak" else donation
        return roles

    def _roles_summary(self) -> str:
        buffers_a, buffers_b = self.a.buffers, self.b.buffers
        parts = []
        for _, row in self.by("role").iterrows():
            if row["delta"] == 0:
                continue
            role = row["group"]
            pa = buffers_a[buffers_a["role"] == role].groupby("source")["bytes"].sum()
            pb = buffers_b[buffers_b["role"] == role].groupby("source")["bytes"].sum()
            change = pb.sub(pa, fill_value=0)
            text = f"{_PLURAL.get(role, role)} {_signed(int(row['delta']))}"
            # the source that moved most the way the role moved: one whose bytes fell is no cause of a rise
            change = change[change > 0] if row["delta"] > 0 else change[change < 0]
            if len(change) and role not in ("parameter", "optimizer state"):
                top = change.abs().idxmax()
                more = len(change) - 1  # the others that moved the same way: the top one is not all of it
                text += (f" ({top}{f', and {more} more' if more else ''})" if top != "unknown" else "")
            parts.append(text)
        return ", ".join(parts) or "no change at the peak"

    def __repr__(self) -> str:
        why = f". {self.why}" if self.why else ""
        # the footprint is said once: in the why where it explains donation, else in the summary
        summary = self.summary(footprint="(the footprint)" not in why)
        return f"peak {_change(self.a.total_bytes, self.b.total_bytes)}: {summary}{why}"

    def _repr_html_(self) -> str:
        rows = [("peak", _change(self.a.total_bytes, self.b.total_bytes))]
        fa, fb = self.footprint_a, self.footprint_b
        if fa is not None and fb is not None and fa != fb:
            rows.append(("footprint (what one run occupies)", _change(fa, fb)))
        if self.why:
            rows.append(("why", self.why))
        from xlakit.memory._donation import donation_summary

        donation = donation_summary(self.a.attribution.donations, self.b.attribution.donations)
        if donation:
            rows.append(("donation", donation.removeprefix("donation: ")))
        for _, r in self.by("role").iterrows():
            rows.append((str(r["group"]), _change(int(r["bytes_a"]), int(r["bytes_b"]))))
        return html_table(rows, title=f"Memory at the peak: {self.labels[0]} → {self.labels[1]}")


def _at(line: str) -> str:
    """Where a copy is read last, in words: its own update is XLA's order, not a later read in the user's code."""
    if line.startswith("by its own update at "):
        return (f"by their own updates at {line.removeprefix('by its own update at ')} (XLA copies before each "
                "update writes into its buffer; no later read of yours)")
    return f"at {line}"


def _exact(n: int, signed: bool = False) -> str:
    """``fmt_bytes`` with the exact bytes: parts of one sentence rounded apart need not add up."""
    return f"{_signed(n)} ({n:+,} B)" if signed else f"{fmt_bytes(n)} ({n:,} B)"


def _peak(x: Any) -> Any:
    from xlakit.memory.attribution import Attribution
    from xlakit.memory.peak import Peak, peak, peak_of

    if isinstance(x, Peak):
        return x
    if isinstance(x, Attribution):
        return peak_of(x)
    if isinstance(x, tuple) and x and callable(x[0]):
        return peak(x[0], *x[1:])
    return peak(x)


def compare(a: Any, b: Any, *, labels: tuple[str, str] | None = None) -> Comparison:
    """Diff two programs' peaks by role, scope and source.

    Args:
      a, b: each a :class:`~xlakit.memory.Peak`, an :class:`~xlakit.memory.Attribution`, a
        ``jax.stages.Compiled``, or a tuple ``(fn, *example_args)``.
      labels: what the display calls the two (``("no donation", "donated")``); default: the programs' names;
        where they are the same name and only one donates arguments (or only one is checkpointed), ``"jit_step"``
        and ``"jit_step, donated"`` (``"jit_step, remat"``); else ``"first (jit_step)"`` and
        ``"second (jit_step)"``.

    Returns:
      :class:`Comparison`; ``repr`` reads "peak 4.5 MiB → 2.5 MiB (−2.0 MiB): residuals −2.0 MiB (...)".

    Raises:
      TypeError / ValueError: as :func:`xlakit.memory.peak` for either program.
    """
    import pandas as pd

    pa, pb = _peak(a), _peak(b)
    frames = []
    for column in _BY:
        ga = pa.buffers.groupby(column, dropna=False)["bytes"].sum()
        gb = pb.buffers.groupby(column, dropna=False)["bytes"].sum()
        both = pd.concat([ga.rename("bytes_a"), gb.rename("bytes_b")], axis=1).fillna(0).astype("int64")
        both["delta"] = both["bytes_b"] - both["bytes_a"]
        both = both.reset_index(names="group")
        both.insert(0, "by", column)
        order = both["delta"].abs().sort_values(ascending=False, kind="stable").index
        frames.append(both.loc[order])
    frame = pd.concat(frames, ignore_index=True)
    if labels is None:
        labels = _default_labels(pa, pb)
    return Comparison(frame=frame, a=pa, b=pb, labels=(str(labels[0]), str(labels[1])))


def _default_labels(pa: Any, pb: Any) -> tuple[str, str]:
    """The two programs' names; for one name twice, what tells them apart where that is known (donation: read from
    each program's ``input_output_alias``), else their order."""
    na, nb = (getattr(p.attribution, "name", None) or "?" for p in (pa, pb))
    if na != nb:
        return na, nb
    donating = [bool(getattr(p.attribution, "_donation_rows", ())) for p in (pa, pb)]
    if donating[0] != donating[1]:
        return tuple(f"{na}, donated" if d else na for d in donating)  # type: ignore[return-value]
    remat = [Comparison._checkpointed(p) for p in (pa, pb)]
    if remat[0] != remat[1]:  # one of them checkpointed (jax.checkpoint / nnx.remat / checkpoint_each)
        return tuple(f"{na}, remat" if r else na for r in remat)  # type: ignore[return-value]
    return f"first ({na})", f"second ({nb})"
