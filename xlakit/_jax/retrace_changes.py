"""What changed between two trace signatures of a function, in words (:mod:`xlakit._jax.retrace` builds the
signatures at trace time and keeps them; this module only compares).

A signature is a dict: ``leaves`` (argument path -> (shape text, dtype text, weak type, sharding text, sharding
key): the text shows the placement, ``""`` when uncommitted; the key is the abstract value's sharding and memory
space, which is what JAX's tracing cache compares), ``static`` (static argument -> value text), ``static_types``
(static argument -> its type's name and the value itself: JAX compares static values by type, hash and ``==``, so
``2`` and ``2.0`` are two programs, and so are two values that print alike but are unequal), ``passed`` (argument ->
``"positionally"`` or ``"by keyword"``), ``structure`` (the pytree), ``trees`` (argument -> its pytree), ``config``
(global settings that change what JAX traces), ``mesh``, and ``ref`` (a weak reference to the function object).

A retrace is explained against the *closest* signature already compiled (:func:`closest`) for the same function
object (JAX keys its cache per object; another object's signatures only when this one has none, and then the new
object is a change), never simply the previous call's. Closeness is counted in differing attributes, one change
each (:func:`diff`): a leaf whose shape and dtype both differ is two changes, a pytree structure change counts
each leaf added or removed (at least one) and each container that changed kind once (its leaves, renamed from
``d[0]`` to ``d.a``, are compared one to one), and a static value, a way of passing, a config setting, the mesh
or the function object one each. On a tie, a static value changed in type only (``2`` -> ``2.0``) is preferred.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
from typing import Any

__all__ = ["Signature", "diff", "distance", "closest", "describe", "static_value"]

Signature = dict[str, Any]


def _text(value: Any, limit: int = 60) -> str:
    try:
        s = repr(value)
    except Exception:  # noqa: BLE001 - any object may be a static argument
        s = f"<{type(value).__name__}>"
    if len(s) <= limit:
        return s  # else head, tail and a digest of the whole: two values cut to the same head are told apart
    return f"{s[:limit - 24]}…{s[-12:]} #{hashlib.sha1(s.encode(errors='replace')).hexdigest()[:6]}"


def static_value(value: Any) -> tuple[str, tuple[str, Any]]:
    """A static argument as ``(text, (type name, value))``. The value itself is kept (JAX's own cache keeps it too):
    JAX tells static values apart by type and ``==``, not by how they print — a ``Mesh`` with its devices in another
    order, or a dataclass whose changed field is left out of its ``repr``, prints the same and is another program."""
    return _text(value), (type(value).__name__, value)


def _context_equal(b: Any, a: Any) -> bool:
    """Whether two trace-context values are one key to JAX (hash, then ``==``; unlike a static argument, the type
    is not compared: ``np.int64(1)`` and ``1`` are one); compared by how they print where either fails."""
    try:
        return hash(b) == hash(a) and bool(b == a)
    except Exception:  # noqa: BLE001
        return _text(b) == _text(a)


def _jax_equal(b: tuple[str, Any] | None, a: tuple[str, Any] | None) -> bool:
    """Whether JAX's tracing cache takes two static values as one: the same type and ``==`` (a value not equal to
    itself, a NaN, never is: every call with it traces again)."""
    if b is None or a is None:
        return b is a
    if type(b[1]) is not type(a[1]):
        return False
    try:
        return hash(b[1]) == hash(a[1]) and bool(b[1] == a[1])  # JAX's cache is a dict: hash, then ==
    except Exception:  # noqa: BLE001 - an odd __eq__ or __hash__: compared by how they print
        return _text(b[1]) == _text(a[1])


def _same_value(b: tuple[str, Any] | None, a: tuple[str, Any] | None) -> bool:
    """Whether two static values of different types are equal in value (``2`` and ``2.0``, ``1`` and ``True``)."""
    if b is None or a is None or b[1] is None or a[1] is None:
        return False
    try:
        return bool(b[1] == a[1])
    except Exception:  # noqa: BLE001 - an odd __eq__: not equal
        return False


class _TreesKey:
    """The arguments' pytrees as JAX's cache compares them (``==``, aux data included)."""

    def __init__(self, trees: dict[str, Any] | None) -> None:
        self.trees = trees

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _TreesKey) or self.trees is None or other.trees is None:
            return isinstance(other, _TreesKey) and self.trees is other.trees
        try:
            return self.trees.keys() == other.trees.keys() and all(
                bool(self.trees[k] == other.trees[k]) for k in self.trees)
        except Exception:  # noqa: BLE001 - an aux data whose == raises: not the same
            return False

    __hash__ = None  # type: ignore[assignment]


class _StaticKey:
    """A static value as JAX's cache compares it (:func:`_jax_equal`), for telling whether it was compiled before."""

    def __init__(self, typed: tuple[str, Any] | None) -> None:
        self.typed = typed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _StaticKey) and _jax_equal(self.typed, other.typed)

    __hash__ = None  # type: ignore[assignment]


def _leaf_text(leaf: tuple) -> str:
    shape, dtype, weak = leaf[:3]
    return f"{'weak ' if weak else ''}{dtype}{shape}"


def _sharding_key(leaf: tuple) -> str:
    return leaf[4] if len(leaf) > 4 else leaf[3]


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


def _tree_text(tree: Any) -> str:
    return str(tree).removeprefix("PyTreeDef(")[:-1]


def _child_keys(tree: Any) -> list[str]:
    """How JAX's argument paths name the children of ``tree``'s root: ``['k']`` in a dict, ``.field`` in a
    namedtuple, ``[i]`` in a list, a tuple or any other node."""
    kind, aux = tree.node_data()
    n = len(tree.children())
    if issubclass(kind, dict):
        keys = aux[1] if issubclass(kind, collections.defaultdict) else aux  # defaultdict: (factory, keys)
        if isinstance(keys, (list, tuple)) and len(keys) == n:
            return [f"[{k!r}]" for k in keys]
    fields = getattr(kind, "_fields", None) if issubclass(kind, tuple) else None
    if fields is not None and len(fields) == n:
        return [f".{f}" for f in fields]
    return [f"[{i}]" for i in range(n)]


def _kind(tree: Any) -> Any:
    """The root node's type (None for a leaf)."""
    data = tree.node_data()
    return None if data is None else data[0]


def _walk(b: Any, a: Any, path: str) -> list[tuple[str, str, str, bool]]:
    """``(path, before, after, kind changed)`` at the deepest nodes where trees ``b`` and ``a`` differ: a node whose
    type, keys or number of children differ is one place (its subtrees shown); one that matches is compared child by
    child, so ``{'a': [x]}`` -> ``{'a': (x,)}`` is ``x['a']: [*] -> (*,)``, not the whole argument."""
    if b == a:
        return []
    kb, ka = _kind(b), _kind(a)
    same = kb is ka and kb is not None and len(b.children()) == len(a.children()) \
        and (b.node_data()[1] == a.node_data()[1]) is True
    if not same:
        return [(path, _tree_text(b), _tree_text(a), kb is not ka)]
    out = [w for key, cb, ca in zip(_child_keys(b), b.children(), a.children(), strict=True)
           for w in _walk(cb, ca, path + key)]
    return out or [(path, _tree_text(b), _tree_text(a), False)]


def _tree_places(before: Signature, after: Signature, leaves_named: bool) -> list[tuple[str, str, str]]:
    """Where the arguments' pytrees differ (:func:`_walk`), for a structure change: every place where a container
    changed kind (a list became a tuple, a leaf a dict, at any depth); with none, the places where keys or
    auxiliary data changed, unless leaves were added or removed (those leaves name the change). Empty when the
    signatures keep no trees (another JAX's frame) or comparing them raises (auxiliary data of any type)."""
    bt, at = before.get("trees") or {}, after.get("trees") or {}
    try:
        walked = [w for name in at if name in bt for w in _walk(bt[name], at[name], name)]
    except Exception:  # noqa: BLE001 - a custom node's auxiliary data may refuse ==; the whole structure is shown
        return []
    kinds = [w[:3] for w in walked if w[3]]
    return kinds or ([] if leaves_named else [w[:3] for w in walked])


def _align(b: Any, a: Any, ib: int, ia: int, out: dict[str, Any]) -> None:
    """Pair the leaves of trees ``b`` and ``a`` (offsets ``ib``, ``ia`` into their arguments' leaves) into
    ``out["pairs"]``: children of a node of one kind by their keys (a dict's key, a tuple's index); of a container
    that changed kind (a tuple became a namedtuple), by position, counting the change once in ``out["kinds"]``.
    A leaf that became a container (or an empty one) pairs nothing: its leaves are removed and added."""
    if b == a:
        out["pairs"].extend((ib + i, ia + i) for i in range(b.num_leaves))
        return
    kb, ka, cb, ca = _kind(b), _kind(a), b.children(), a.children()
    if kb is None or ka is None or not cb or not ca:
        return
    if kb is ka:
        keys = {k: i for i, k in enumerate(_child_keys(b))}
        matched = [(keys[k], j) for j, k in enumerate(_child_keys(a)) if k in keys]
    else:
        out["kinds"] += 1
        matched = [(j, j) for j in range(min(len(cb), len(ca)))]
    starts_b = list(itertools.accumulate((c.num_leaves for c in cb[:-1]), initial=ib))  # a wide dict: linear
    starts_a = list(itertools.accumulate((c.num_leaves for c in ca[:-1]), initial=ia))
    for i, j in matched:
        _align(cb[i], ca[j], starts_b[i], starts_a[j], out)


def _pairing(before: Signature, after: Signature) -> tuple[dict[str, str], int] | None:
    """``({after path: before path}, containers that changed kind)`` for the leaves of the two signatures that are
    one argument's same leaf (renamed where a container changed kind: ``d[0]`` -> ``d.a``); None when the trees are
    not kept or do not line up with the leaves (another JAX's frame)."""
    bt, at = before.get("trees") or {}, after.get("trees") or {}
    bl, al = list(before["leaves"]), list(after["leaves"])
    try:
        if not bt or not at or sum(t.num_leaves for t in bt.values()) != len(bl) \
                or sum(t.num_leaves for t in at.values()) != len(al):
            return None
        starts_b = dict(zip(bt, itertools.accumulate((t.num_leaves for t in bt.values()), initial=0), strict=False))
        out: dict[str, Any] = {"pairs": [], "kinds": 0}
        ia = 0
        for name, tree in at.items():
            if name in bt:
                _align(bt[name], tree, starts_b[name], ia, out)
            ia += tree.num_leaves
    except Exception:  # noqa: BLE001 - a custom node's auxiliary data may refuse ==: compared by path
        return None
    return {al[j]: bl[i] for i, j in out["pairs"]}, out["kinds"]


def _trees_equal(before: Signature, after: Signature) -> bool:
    """Whether the arguments' pytrees are == (JAX's test: metadata ``1`` and ``1.0`` are one tree) though they
    print differently."""
    bt, at = before.get("trees") or {}, after.get("trees") or {}
    try:
        return bool(bt) and bt.keys() == at.keys() and all(bool(bt[k] == at[k]) for k in bt)
    except Exception:  # noqa: BLE001 - a node's aux data that refuses ==: compared by how they print
        return False


def _compare(before: Signature, after: Signature) -> tuple[list[dict[str, str]], int, int]:
    """``(changes, distance, type-only static changes)``: one change per differing attribute, and their count (a
    structure change weighs the number of leaves added or removed plus the containers that changed kind, at least
    one); the last breaks a tie (:func:`closest`)."""
    out: list[dict[str, str]] = []
    weight = 0
    type_only = 0

    def add(what: str, path: str, b: str, a: str, w: int = 1, note: str = "") -> None:
        nonlocal weight
        out.append({"what": what, "path": path, "before": b, "after": a, **({"note": note} if note else {})})
        weight += w

    bl, al = before["leaves"], after["leaves"]
    bp, ap = before.get("passed", {}), after.get("passed", {})
    reshaped = list(bl) != list(al) or (before["structure"] != after["structure"] and not _trees_equal(before, after))
    if not reshaped:  # the same text; JAX compares the trees with ==, their metadata (a node's aux data) included
        for name in _unequal_trees(before, after):
            tree_shown = _tree_text(after["trees"][name])[:80]
            add("structure", name, tree_shown, tree_shown,
                note="its pytree metadata (a node's aux data) prints the same but is not == the earlier one")
    paired = _pairing(before, after) if reshaped else None
    pairs, kinds = paired if paired is not None else ({p: p for p in al if p in bl}, 0)
    if reshaped:
        kept = set(pairs.values())
        gone, new = [p for p in bl if p not in kept], [p for p in al if p not in pairs]
        named = gone + new + [n for n in bp if n not in ap] + [n for n in ap if n not in bp]
        weight = max(1, len(gone) + len(new) + kinds)
        places = _tree_places(before, after, bool(named))
        for i, (path, b_text, a_text) in enumerate(places):  # where a container changed kind: named there
            add("structure", path, *_where_differs(b_text, a_text), weight if i == 0 else 1)
        if not places:
            b_text, a_text = before["structure"], after["structure"]
            if b_text == a_text:  # the same tree under other argument names (b= then c=): the names are the change
                b_text, a_text = ", ".join(bl) or "no arrays", ", ".join(al) or "no arrays"
            add("structure", (named or ["arguments"])[0], *_where_differs(b_text, a_text), weight)
    for path in (p for p in al if p in pairs):  # a leaf renamed by a container's change of kind: by its new path
        b, a = bl[pairs[path]], al[path]
        for what, i in (("shape", 0), ("dtype", 1), ("weak_type", 2)):
            if b[i] != a[i]:  # every attribute that differs is named, not only the first
                add(what, path, _leaf_text(b), _leaf_text(a))
        if _sharding_key(b) != _sharding_key(a):
            shown = (b[3] or "uncommitted", a[3] or "uncommitted")
            add("sharding", path, *(shown if shown[0] != shown[1] else (_sharding_key(b), _sharding_key(a))))
    bs, as_ = before["static"], after["static"]
    btypes, atypes = before.get("static_types", {}), after.get("static_types", {})
    for path in sorted(set(bs) | set(as_)):
        tb, ta = btypes.get(path), atypes.get(path)
        retyped = tb is not None and ta is not None and tb[0] != ta[0]
        if not _jax_equal(tb, ta) if tb is not None and ta is not None else bs.get(path) != as_.get(path):
            b_text, a_text = bs.get(path, "absent"), as_.get(path, "absent")
            if retyped and (b_text == a_text or _same_value(tb, ta)):  # JAX compares the type too: say which
                b_text, a_text = f"{b_text} ({tb[0]})", f"{a_text} ({ta[0]})"  # type: ignore[index]
                type_only += _same_value(tb, ta)
            note = ""
            if b_text == a_text and ta is not None and not _jax_equal(ta, ta):
                note = "not equal to itself: JAX traces again on every call with it"
            elif b_text == a_text and not retyped:  # printed alike, unequal to JAX (==): or it reads as no change
                note = "prints the same but is not == the earlier value"
            add("static", path, b_text, a_text, note=note)
    for name in (n for n in ap if n in bp and bp[n] != ap[n]):  # keyword or positional: part of JAX's key
        add("passed", name, bp[name], ap[name])
    bc, ac = before["config"], after["config"]
    bv, av = before.get("config_values") or {}, after.get("config_values") or {}
    for name in [*ac, *(n for n in bc if n not in ac)]:
        if name in bv and name in av:  # a trace-context value: JAX's key holds the value, compared by hash and ==
            if _context_equal(bv[name][1], av[name][1]):
                continue  # 1 and 1.0, reordered metadata, a repr that differs per instance: the same to JAX
            alike = bc.get(name) == ac.get(name)
            add("config", name, str(bc.get(name)), str(ac.get(name)),
                note="prints the same but is not == the earlier value" if alike else "")
        elif bc.get(name) != ac.get(name):
            add("config", name, str(bc.get(name)), str(ac.get(name)))
    if before["mesh"] != after["mesh"]:
        add("sharding", "mesh", *_where_differs(before["mesh"], after["mesh"]))
    bo, ao = before.get("options") or {}, after.get("options") or {}
    for name in (n for n in ao if n in bo and bo[n] != ao[n]):  # another jax.jit of the function, other options
        add("option", f"jax.jit {name}", bo[name], ao[name])
    if before["ref"]() is not after["ref"]():  # JAX keys its cache on the function object itself
        add("function", after.get("qualname") or "function", "an earlier function object",
            "a new function object (same code)")
    return out, weight, type_only


def _unequal_trees(before: Signature, after: Signature) -> list[str]:
    """The arguments whose pytree is not ``==`` the earlier one's (JAX's tracing cache compares them so)."""
    bt, at = before.get("trees") or {}, after.get("trees") or {}
    out = []
    for name, tree in at.items():
        try:
            if name in bt and not bool(bt[name] == tree):
                out.append(name)
        except Exception:  # noqa: BLE001 - an aux data whose == raises: JAX would raise too
            continue
    return out


def diff(before: Signature, after: Signature) -> list[dict[str, str]]:
    """The changes from ``before`` to ``after``, one per differing attribute: dicts with ``what``, ``path``,
    ``before``, ``after`` (a leaf's shape, dtype and weak type changes each show its whole ``float32[8]``)."""
    return _compare(before, after)[0]


def distance(before: Signature, after: Signature) -> int:
    """How many attributes differ between ``before`` and ``after`` (0: the same signature)."""
    return _compare(before, after)[1]


def _attribute(sig: Signature, what: str, path: str) -> Any:
    """What ``sig`` has for the change ``what`` at ``path``, to tell whether a new value was compiled before
    (None: not comparable). A leaf's shape, dtype or weak type is shown as the whole leaf, so it is compared
    whole: ``int32[3]`` was compiled before only if exactly that was."""
    leaf = sig["leaves"].get(path)
    if what in ("shape", "dtype", "weak_type"):
        return leaf[:3] if leaf is not None else None
    if what == "sharding":
        return sig["mesh"] if path == "mesh" else (_sharding_key(leaf) if leaf is not None else None)
    if what == "static":
        typed = sig.get("static_types", {}).get(path)
        return _StaticKey(typed) if typed is not None else sig["static"].get(path, "absent")
    if what == "passed":
        return sig.get("passed", {}).get(path)
    if what == "config":
        return str(sig["config"].get(path))
    if what == "structure":
        return sig["structure"], tuple(sig["leaves"]), _TreesKey(sig.get("trees"))
    if what == "option":
        return (sig.get("options") or {}).get(path.removeprefix("jax.jit "))
    return None  # a new function object was never compiled before


def closest(history: list[Signature], sig: Signature) -> tuple[list[dict[str, str]], bool]:
    """``(changes, latest)``: the changes from the signature closest to ``sig`` (fewest differing attributes,
    :func:`distance`; on a tie, the one with more static values changed in type only, then the latest) among those
    in ``history`` (oldest first) of the same function object (JAX keys its tracing cache per object: another
    object's signatures are compared only when this object has none, and then the new object is one change), and
    whether that is the latest of them. A change whose new value one of them already had gets ``seen: "yes"`` (it
    was compiled before, in another combination: only together with the other changes is it new)."""
    this = sig["ref"]()
    own = [h for h in history if this is not None and h["ref"]() is this]
    pool = own or history
    best: tuple[list[dict[str, str]], int, int] | None = None
    latest = True
    for i, before in enumerate(reversed(pool)):
        compared = _compare(before, sig)
        if best is None or (compared[1], -compared[2]) < (best[1], -best[2]):
            best, latest = compared, i == 0
    changes = best[0] if best is not None else []
    for c in changes:
        now = _attribute(sig, c["what"], c["path"])
        if now is not None and any(_attribute(h, c["what"], c["path"]) == now for h in pool):
            c["seen"] = "yes"
    return changes, latest


def _seen_text(c: dict[str, str]) -> str:
    if c.get("note"):
        return f" ({c['note']}; an equal value was compiled before, with other arguments)"
    if c["what"] == "passed":
        return f" ({c['path']} was passed {c['after']} before, with other arguments)"
    if c["what"] == "structure":
        return " (this structure was compiled before, with other arguments)"
    return f" ({c['after']} was compiled before, with other arguments)"


def describe(changes: list[dict[str, str]], latest: bool = True) -> str:
    """One line: ``x: shape float32[8] -> float32[16]; n: static 2 -> 3 (3 was compiled before, ...)``; the
    attributes of one leaf that changed together read ``x: shape and dtype float32[2] -> int32[3]``; ``b:
    passed by keyword -> positionally``; ``latest`` False: the changes are against an earlier compiled
    signature than the previous trace's."""
    if not changes:
        return ("no argument changed: JAX's tracing cache no longer held this signature (a new jax.jit object, "
                "jax.clear_caches(), or an evicted entry)")
    groups: list[tuple[list[str], dict[str, str]]] = []
    for c in changes:
        last = groups[-1][1] if groups else None
        if last is not None and all(last.get(k) == c.get(k) for k in ("path", "before", "after", "seen", "note")):
            groups[-1][0].append(c["what"])  # one leaf, one before and after text: name its attributes together
        else:
            groups.append(([c["what"]], c))
    parts = []
    for whats, c in groups:
        what = whats[0] if len(whats) == 1 else ", ".join(whats[:-1]) + " and " + whats[-1]
        told = _seen_text(c) if c.get("seen") else f" ({c['note']})" if c.get("note") else ""
        parts.append(f"{c['path']}: {what} {c['before']} -> {c['after']}{told}")
    return "; ".join(parts) + ("" if latest else " [against the closest signature compiled before, not the "
                                                 "previous call's]")
