"""What changed between two trace signatures of a function, in words (:mod:`xlakit._jax.retrace` builds the
signatures at trace time and keeps them; this module only compares).

A signature is a dict: ``leaves`` (argument path -> (shape text, dtype text, weak type, sharding text)),
``static`` (static argument -> value text), ``structure`` (the pytree), ``config`` (global settings that change
what JAX traces), ``mesh``, and ``ref`` (a weak reference to the function object). A retrace is explained
against the *closest* signature already compiled (:func:`closest`), never simply the previous call's.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Signature", "diff", "closest", "describe"]

Signature = dict[str, Any]


def _leaf_text(leaf: tuple[str, str, bool, str]) -> str:
    shape, dtype, weak, _ = leaf
    return f"{'weak ' if weak else ''}{dtype}{shape}"


def _where_differs(b: str, a: str, width: int = 120) -> tuple[str, str]:
    """``b`` and ``a`` cut to ``width`` characters around where they differ: a flax.nnx module's tree structure
    is a GraphDef dump of thousands of characters whose first 120 are the same whatever changed (a static
    ``remat=False`` -> ``True`` deep inside); the common start and end are shown as ``…``."""
    if len(b) <= width and len(a) <= width:
        return b, a
    n = min(len(b), len(a))
    head = next((i for i in range(n) if b[i] != a[i]), n)
    tail = next((i for i in range(n - head) if b[-1 - i] != a[-1 - i]), n - head)
    start = max(0, head - 40)

    after = max(0, tail - 20)  # a little of the common end too: "False" and "True" share their "e"

    def cut(text: str) -> str:
        middle = text[start:len(text) - after]
        return ("…" if start else "") + middle[:width] + ("…" if len(middle) > width or after else "")

    return cut(b), cut(a)


def diff(before: Signature, after: Signature) -> list[dict[str, str]]:
    """The changes from ``before`` to ``after``: dicts with ``what``, ``path``, ``before``, ``after``."""
    out: list[dict[str, str]] = []

    def add(what: str, path: str, b: str, a: str) -> None:
        out.append({"what": what, "path": path, "before": b, "after": a})

    bl, al = before["leaves"], after["leaves"]
    if list(bl) != list(al) or before["structure"] != after["structure"]:
        gone, new = [p for p in bl if p not in al], [p for p in al if p not in bl]
        add("structure", (gone or new or ["arguments"])[0], *_where_differs(before["structure"], after["structure"]))
    for path in (p for p in al if p in bl):
        b, a = bl[path], al[path]
        if b[0] != a[0]:
            add("shape", path, _leaf_text(b), _leaf_text(a))
        elif b[1] != a[1]:
            add("dtype", path, _leaf_text(b), _leaf_text(a))
        elif b[2] != a[2]:
            add("weak_type", path, _leaf_text(b), _leaf_text(a))
        elif b[3] != a[3]:
            add("sharding", path, b[3] or "uncommitted", a[3] or "uncommitted")
    bs, as_ = before["static"], after["static"]
    for path in sorted(set(bs) | set(as_)):
        if bs.get(path) != as_.get(path):
            add("static", path, bs.get(path, "absent"), as_.get(path, "absent"))
    for name, value in after["config"].items():
        if before["config"].get(name) != value:
            add("config", name, str(before["config"].get(name)), value)
    if before["mesh"] != after["mesh"]:
        add("sharding", "mesh", before["mesh"][:120], after["mesh"][:120])
    if not out and before["ref"]() is not after["ref"]():
        add("function", after.get("qualname") or "function", "an earlier function object",
            "a new function object (same code)")
    return out


def _value(sig: Signature, what: str, path: str) -> str | None:
    """The text :func:`diff` gives for ``path``'s ``what`` in ``sig`` (None: not comparable)."""
    leaf = sig["leaves"].get(path)
    if what in ("shape", "dtype", "weak_type"):
        return _leaf_text(leaf) if leaf is not None else None
    if what == "sharding":
        return sig["mesh"][:120] if path == "mesh" else ((leaf[3] or "uncommitted") if leaf is not None else None)
    if what == "static":
        return sig["static"].get(path, "absent")
    if what == "config":
        return str(sig["config"].get(path))
    return None


def closest(history: list[Signature], sig: Signature) -> tuple[list[dict[str, str]], bool]:
    """``(changes, latest)``: the changes from the signature in ``history`` (oldest first) closest to ``sig``
    (fewest changes, the latest on a tie), and whether that is the latest one. A change whose new value some
    signature in ``history`` already had gets ``seen: "yes"`` (it was compiled before, in another combination:
    only together with the other changes is it new)."""
    best: list[dict[str, str]] | None = None
    latest = True
    for i, before in enumerate(reversed(history)):
        changes = diff(before, sig)
        if best is None or len(changes) < len(best):
            best, latest = changes, i == 0
    for c in best or ():
        if any(_value(h, c["what"], c["path"]) == c["after"] for h in history):
            c["seen"] = "yes"
    return best or [], latest


def describe(changes: list[dict[str, str]], latest: bool = True) -> str:
    """One line: ``x: shape float32[8] -> float32[16]; n: static 2 -> 3 (3 was compiled before, ...)``;
    ``latest`` False: the changes are against an earlier compiled signature than the previous trace's."""
    if not changes:
        return ("no argument changed: JAX's tracing cache no longer held this signature (a new jax.jit object, "
                "jax.clear_caches(), or an evicted entry)")
    text = "; ".join(f"{c['path']}: {c['what']} {c['before']} -> {c['after']}"
                     + (f" ({c['after']} was compiled before, with other arguments)" if c.get("seen") else "")
                     for c in changes)
    return text + ("" if latest else " [against the closest signature compiled before, not the previous call's]")
