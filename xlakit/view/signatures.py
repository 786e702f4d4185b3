"""Argument signatures of cache entries as text, and the leaves that tell one function's entries apart.

An entry header records its argument signature as one ``{"shape", "dtype", "sharding", "donation"}`` dict per
flattened argument leaf, in argument order. :func:`signature_text` writes it out whole
(``f32[8,4] @mesh[{"x"}, {}], f32[4] donated``). A table column cannot hold that for a model's parameters, and
cutting it to a width kept only the first leaves: two entries of ``f(params, batch)`` that differ only in
``batch``'s shape read the same. :func:`distinguishing_texts` abbreviates instead the leaves the entries of
one function share and always keeps those that differ. Pure functions, no dependencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["sharding_text", "leaf_text", "leaf_texts", "signature_text", "distinguishing_texts", "differing_leaves",
           "LIMIT"]

#: Characters a signature is shortened to in tables and selector lines.
LIMIT = 120


def sharding_text(sharding: str) -> str:
    """A recorded sharding, shorter: Shardy's ``#sdy.sharding<@mesh, [{"x"}, {}]>`` reads
    ``@mesh[{"x"}, {}]``; GSPMD's ``{devices=[2,1]<=[2]}`` is kept as it is."""
    text = sharding.strip()
    if text.startswith("#sdy.sharding<") and text.endswith(">"):
        text = text[len("#sdy.sharding<"):-1].replace(", [", "[", 1)
    return text


def leaf_text(arg: Any) -> str:
    """One recorded argument leaf as ``dtype[shape]``, then its sharding (:func:`sharding_text`) when recorded
    and ``donated`` when it is; anything but a dict as ``str``."""
    if not isinstance(arg, dict):
        return str(arg)
    shape = arg.get("shape")
    dims = "" if shape in (None, "scalar") else str(shape).replace("x", ",")
    text = f"{arg.get('dtype') or '?'}[{dims}]"
    sharding = arg.get("sharding")
    if sharding:
        text += f" {sharding_text(str(sharding))}"
    if arg.get("donation"):
        text += " donated"
    return text


def leaf_texts(signature: Sequence[Any] | None) -> list[str]:
    """:func:`leaf_text` of every leaf of a recorded signature (``[]`` for None)."""
    return [leaf_text(a) for a in signature or ()]


#: A leaf's text when it was donated ends so (:func:`leaf_text`).
_DONATED = " donated"
#: Leaves that differ only in donation and are still shown one by one; past it the donated ones are counted.
_DONATION_LEAVES = 3


def _at(leaves: list[str], j: int) -> str | None:
    return leaves[j] if j < len(leaves) else None


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def signature_text(signature: Sequence[Any] | None, limit: int | None = None) -> str:
    """A recorded signature as one line, every leaf (:func:`leaf_text`) joined by ``", "``, cut to ``limit``
    characters when given (None: whole); "" when it records none."""
    return _cut(", ".join(leaf_texts(signature)), limit)


def _render(leaves: Sequence[str], kept: set[int], differing: set[int], limit: int | None) -> str:
    """``leaves`` with each run of positions not ``kept`` written ``…(n same)``; past ``limit`` characters
    (once a differing leaf is shown) the rest is counted: ``…(k more differ)``."""
    parts: list[str] = []
    run = 0
    shown_diff = 0
    for j, leaf in enumerate(leaves):
        if j not in kept:
            run += 1
            continue
        if run:
            parts.append(f"…({run} same)")
            run = 0
        if limit is not None and shown_diff and len(", ".join([*parts, leaf])) > limit:
            rest = sum(1 for k in range(j, len(leaves)) if k in differing)
            parts.append(f"…({rest} more differ)" if rest else "…")
            return ", ".join(parts)
        parts.append(leaf)
        shown_diff += j in differing
    if run:
        parts.append(f"…({run} same)")
    return ", ".join(parts)


def distinguishing_texts(signatures: Sequence[Sequence[str] | None], limit: int = LIMIT) -> list[str | None]:
    """Texts of the recorded signatures (leaf texts, e.g. :func:`leaf_texts`) of one function's entries, each
    at most about ``limit`` characters, that tell them apart.

    When the signatures are all alike (or there is one), each is cut to ``limit``. Otherwise the positions
    where any two differ (a leaf of another shape, dtype or sharding, or a leaf one has and another lacks)
    are always shown; the shared leaves are shown too from the first on while the longest text stays within
    ``limit``, and every other run of shared leaves is written ``…(n same)``. Every entry shows the same
    positions, so the texts line up leaf for leaf. When the differing leaves alone are longer than ``limit``,
    the first that fit are shown and the rest counted (``…(k more differ)``). None stays None (an entry that
    records no signature).
    """
    recorded = [list(s) for s in signatures if s is not None]
    if len(recorded) < 2 or all(s == recorded[0] for s in recorded):
        return [None if s is None else _cut(", ".join(s), limit) for s in signatures]
    plain = [[leaf.removesuffix(_DONATED) for leaf in s] for s in recorded]
    by_donation = {j for j in range(max(len(s) for s in plain))
                   if len({_at(s, j) for s in plain}) == 1 and len({_at(s, j) for s in recorded}) > 1}
    if len(by_donation) > _DONATION_LEAVES:
        # A donated variant differs in every leaf it donates (a train step: hundreds), which crowded out the
        # leaves whose shapes differ; count its donated leaves instead, after the shapes.
        counts = [sum(leaf.endswith(_DONATED) for leaf in s) for s in recorded]
        texts = iter(distinguishing_texts(plain, limit))
        tagged = iter(f"{next(texts)}; {n} donated" if n else next(texts) for n in counts)
        return [None if s is None else next(tagged) for s in signatures]
    width = max(len(s) for s in recorded)

    differing = {j for j in range(width) if len({_at(s, j) for s in recorded}) > 1}
    kept = set(differing)
    for j in range(width):  # shared leaves from the first on, while the longest text fits
        if j in kept:
            continue
        trial = kept | {j}
        if max(len(_render(s, trial, differing, None)) for s in recorded) > limit:
            break
        kept = trial
    return [None if s is None else _render(list(s), kept, differing, limit) for s in signatures]


def differing_leaves(signatures: Sequence[Sequence[str] | None]) -> list[str | None]:
    """The shortest texts that tell one function's entries apart, for a chart's labels: only the leaves where
    they differ, ``"…"`` for the shared ones before and after (``"…, i32[16,128], i32[16,128]"``), and the number
    of donated leaves when donation differs (``"…, i32[8,128], i32[8,128]; 155 donated"``). None for an entry
    without a signature, or for all when fewer than two have one."""
    recorded = [list(s) for s in signatures if s is not None]
    if len(recorded) < 2:
        return [None] * len(signatures)
    plain = [[leaf.removesuffix(_DONATED) for leaf in s] for s in recorded]
    width = max(len(s) for s in plain)
    differing = [j for j in range(width) if len({_at(s, j) for s in plain}) > 1]
    counts = [sum(leaf.endswith(_DONATED) for leaf in s) for s in recorded]
    texts = []
    for leaves, n in zip(plain, counts, strict=True):
        shown = [leaves[j] for j in differing if j < len(leaves)]
        text = ("…, " if differing and differing[0] > 0 else "") + ", ".join(shown)
        text += ", …" if differing and differing[-1] < len(leaves) - 1 else ""
        if len(set(counts)) > 1 and n:
            text += f"; {n} donated"
        texts.append(text)
    it = iter(texts)
    return [None if s is None else next(it) for s in signatures]
