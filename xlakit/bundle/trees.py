"""Output pytrees as plain JSON in the manifest, and back — without pickling and without importing anything.

``jax.export`` serializes only the node types it was told about (a namedtuple, a registered dataclass or a
dict with int keys in the output make ``Exported.serialize`` fail), so a version-2 bundle's modules return
their outputs as a flat tuple of leaves, and the manifest keeps the tree as data:

* ``{"leaf": i}`` — output leaf ``i`` (the manifest's ``outputs[variant][i]``);
* ``null`` — ``None``; ``{"tuple": [...]}``, ``{"list": [...]}``;
* ``{"dict": [[key, node], ...]}`` — a dict; keys are JSON strings, ints, floats, bools or tagged tuples;
* ``{"node": "module:QualName", "aux": value, "names": [...], "children": [...]}`` — any other registered
  pytree node (namedtuple, ``jax.tree_util.register_dataclass``, ``flax.struct``, custom nodes). ``aux`` is the
  node's auxiliary data (``PyTreeDef.node_data()``) when it is plain data (None, bools, ints, finite floats,
  strings, and tagged lists/tuples/dicts of those); ``names`` are the children's keys (field names).

Loading rebuilds a ``PyTreeDef`` once (:func:`build_treedef`). A node class is looked up only in modules
this process has already imported (nothing is imported because a file says so); when it is not there, or
its aux data could not be stored, the node comes back as a dict of its children by ``names`` and the
reason is reported. No JAX at import time.
"""

from __future__ import annotations

import math
import sys
from typing import Any

__all__ = ["TreeError", "MAX_TREE_DEPTH", "encode_tree", "tree_leaf_count", "build_treedef"]

MAX_TREE_DEPTH = 64


class TreeError(ValueError):
    """An output tree that cannot be stored, or a stored one that is malformed."""


class _Unencodable(Exception):
    pass


# -- aux values ----------------------------------------------------------------------------------------------

def _enc_value(v: Any, depth: int = 0) -> Any:
    if depth > MAX_TREE_DEPTH:
        raise _Unencodable("nested too deeply")
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        if abs(v) >= 10 ** 30:
            raise _Unencodable("integer too large")
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _Unencodable("non-finite float")
        return v
    if type(v) is tuple:
        return {"tuple": [_enc_value(x, depth + 1) for x in v]}
    if type(v) is list:
        return {"list": [_enc_value(x, depth + 1) for x in v]}
    if type(v) is dict:
        return {"dict": [[_enc_value(k, depth + 1), _enc_value(x, depth + 1)] for k, x in v.items()]}
    raise _Unencodable(f"a {type(v).__name__}")


def _dec_value(v: Any, depth: int = 0) -> Any:
    if depth > MAX_TREE_DEPTH:
        raise TreeError(f"aux data nested deeper than {MAX_TREE_DEPTH}")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict) and len(v) == 1:
        (tag, body), = v.items()
        if tag in ("tuple", "list") and isinstance(body, list):
            items = [_dec_value(x, depth + 1) for x in body]
            return tuple(items) if tag == "tuple" else items
        if tag == "dict" and isinstance(body, list):
            out = {}
            for pair in body:
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise TreeError("aux dict item is not a [key, value] pair")
                key = _dec_value(pair[0], depth + 1)
                try:
                    out[key] = _dec_value(pair[1], depth + 1)
                except TypeError:
                    raise TreeError("aux dict key is not hashable") from None
            return out
    raise TreeError(f"unexpected aux value {str(v)[:60]}")


# -- encoding (at export, on the traced output) -----------------------------------------------------------------

def _key_name(entry: Any) -> Any:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return str(entry)


def encode_tree(out: Any) -> tuple[Any, int]:
    """``(json_tree, leaf_count)`` of the pytree ``out`` (leaves numbered in ``jax.tree_util`` flatten
    order). Raises :class:`TreeError` when a dict key cannot be stored or the tree is deeper than
    :data:`MAX_TREE_DEPTH`."""
    counter = [0]
    return _encode(out, counter, 0), counter[0]


def _encode(obj: Any, counter: list, depth: int) -> Any:
    import jax

    if depth > MAX_TREE_DEPTH:
        raise TreeError(f"the output pytree is nested deeper than {MAX_TREE_DEPTH} levels")
    td: Any = jax.tree_util.tree_structure(obj)  # jaxlib PyTreeDef: num_nodes, num_leaves, node_data()
    if td.num_nodes == 1 and td.num_leaves == 1:
        counter[0] += 1
        return {"leaf": counter[0] - 1}
    typ, aux = td.node_data()
    if typ is type(None):
        return None
    kids, _ = jax.tree_util.tree_flatten_with_path(obj, is_leaf=lambda n: n is not obj)
    children = [_encode(child, counter, depth + 1) for _, child in kids]
    if typ is tuple:
        return {"tuple": children}
    if typ is list:
        return {"list": children}
    if typ is dict:
        try:
            keys = [_enc_value(k) for k in aux]
        except _Unencodable as e:
            raise TreeError(f"an output dict key cannot be stored ({e}); use str or int keys") from None
        return {"dict": [[k, c] for k, c in zip(keys, children, strict=True)]}
    node: dict[str, Any] = {"node": f"{typ.__module__}:{typ.__qualname__}",
                            "names": [_name_value(_key_name(path[-1])) if path else str(i)
                                      for i, (path, _) in enumerate(kids)],
                            "children": children}
    try:
        node["aux"] = _enc_value(aux)
    except _Unencodable:
        node["aux_unstored"] = True  # rebuilt as a dict of its children on load
    return node


def _name_value(k: Any) -> Any:
    return k if isinstance(k, (str, int)) and not isinstance(k, bool) else str(k)


# -- validation (no JAX) -------------------------------------------------------------------------------------

def tree_leaf_count(tree: Any) -> int:
    """Number of leaves of a stored tree, checking its shape: leaves numbered 0, 1, ... in order, known node
    kinds only, depth at most :data:`MAX_TREE_DEPTH`. Iterative. Raises :class:`TreeError`."""
    count = 0
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_TREE_DEPTH:
            raise TreeError(f"nested deeper than {MAX_TREE_DEPTH} levels")
        if node is None:
            continue
        if not isinstance(node, dict):
            raise TreeError(f"expected a node object or null, got {type(node).__name__}")
        if "leaf" in node:
            if node["leaf"] != count or isinstance(node["leaf"], bool) or len(node) != 1:
                raise TreeError(f"leaf {node.get('leaf')!r} out of order (expected {{'leaf': {count}}})")
            count += 1
            continue
        if "tuple" in node or "list" in node:
            body = node.get("tuple", node.get("list"))
            if len(node) != 1 or not isinstance(body, list):
                raise TreeError("a tuple/list node must be {'tuple': [...]} or {'list': [...]}")
            stack.extend((c, depth + 1) for c in reversed(body))
        elif "dict" in node:
            body = node["dict"]
            if len(node) != 1 or not isinstance(body, list) or not all(
                    isinstance(p, list) and len(p) == 2 for p in body):
                raise TreeError("a dict node must be {'dict': [[key, node], ...]}")
            stack.extend((p[1], depth + 1) for p in reversed(body))
        elif "node" in node:
            kids, names = node.get("children"), node.get("names")
            if not isinstance(node["node"], str) or ":" not in node["node"]:
                raise TreeError("'node' must be 'module:QualName'")
            if not isinstance(kids, list) or not isinstance(names, list) or len(kids) != len(names):
                raise TreeError("a class node needs 'children' and 'names' lists of the same length")
            stack.extend((c, depth + 1) for c in reversed(kids))
        else:
            raise TreeError(f"unknown node {sorted(node)[:3]}")
    return count


# -- loading -------------------------------------------------------------------------------------------------

def _resolve(qualified: str) -> type | None:
    """The class named ``module:QualName`` if its module is already imported; never imports."""
    module, _, qual = qualified.partition(":")
    obj = sys.modules.get(module)
    if obj is None or not qual:
        return None
    for part in qual.split("."):
        if part.startswith("<") or not part.isidentifier():
            return None
        try:  # the namespace itself, never a module __getattr__ hook (which may import)
            obj = vars(obj).get(part)
        except TypeError:
            return None
        if obj is None:
            return None
    return obj if isinstance(obj, type) else None


def build_treedef(tree: Any) -> tuple[Any, list[str]]:
    """``(PyTreeDef, notes)`` for a stored tree (checked with :func:`tree_leaf_count` first). ``notes`` say
    which class nodes came back as dicts, and why. Raises :class:`TreeError` for a malformed tree."""
    tree_leaf_count(tree)
    notes: list[str] = []
    return _build(tree, notes), notes


def _build(node: Any, notes: list[str]):
    import jax
    from jax.tree_util import PyTreeDef

    registry = jax.tree_util.default_registry
    if node is None:
        return jax.tree_util.tree_structure(None)
    if "leaf" in node:
        return jax.tree_util.tree_structure(0)
    if "tuple" in node or "list" in node:
        kind = tuple if "tuple" in node else list
        kids = [_build(c, notes) for c in node.get("tuple", node.get("list"))]
        return PyTreeDef.from_node_data_and_children(registry, (kind, None), kids)
    if "dict" in node:
        keys = [_dec_value(k) for k, _ in node["dict"]]
        kids = [_build(c, notes) for _, c in node["dict"]]
        return _dict_node(registry, keys, kids)
    kids = [_build(c, notes) for c in node["children"]]
    cls = _resolve(node["node"])
    why = None
    if cls is None:
        module = node["node"].partition(":")[0]
        why = f"{node['node']} is not defined in this process (import {module} before load_bundle to get it back)"
    elif node.get("aux_unstored"):
        why = f"{node['node']}'s auxiliary data could not be stored in the manifest"
    else:
        try:
            return PyTreeDef.from_node_data_and_children(registry, (cls, _dec_value(node.get("aux"))), kids)
        except Exception as e:  # noqa: BLE001 - not a registered node, or aux it refuses
            why = f"{node['node']} could not be rebuilt ({type(e).__name__}: {e})"
    notes.append(f"{why}; it comes back as a dict of its fields {node['names'][:8]}")
    names = node["names"]
    if len(set(map(repr, names))) != len(names):
        names = [str(i) for i in range(len(names))]
    return _dict_node(registry, names, kids)


def _dict_node(registry, keys: list, kids: list):
    from jax.tree_util import PyTreeDef

    # The stored order is the order the leaves were flattened in (JAX's sorted-key order): keep it.
    if len(set(map(repr, keys))) != len(keys):
        raise TreeError(f"duplicate dict keys {keys[:8]}")
    try:
        return PyTreeDef.from_node_data_and_children(registry, (dict, keys), kids)
    except Exception as e:  # noqa: BLE001 - e.g. an unhashable key
        raise TreeError(f"dict node could not be rebuilt ({type(e).__name__}: {e})") from None
