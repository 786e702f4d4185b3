"""Which pytree leaf of a jitted function's arguments each entry parameter of its compiled program holds.

``Compiled.in_tree`` is the treedef of ``(args, kwargs)``; JAX flattens it in that order, then drops the leaves
the program does not use (``keep_unused=False``, the default) before lowering. The kept leaves are recorded on
the private ``Compiled._executable._kept_var_idx`` (a set of flat indices; checked on jax 0.10.2), so entry
parameter ``p`` is the ``p``-th kept leaf. Where that attribute is missing the mapping is only trusted when
every leaf became a parameter.

``nnx.jit`` passes each flax.nnx graph node (a Module, an ``nnx.Optimizer``) as a ``NodeStates`` whose leaves
are a flat list with no path (``model.states[0][3]``); when the example arguments are given, each such leaf is
named by the node's own graph path instead (``nnx.graph.flatten(node, with_paths=True)``, the order nnx.jit
flattens in): ``model['block']['attn']['qkv']['kernel']``, ``optimizer['opt_state'][0]['mu'][...]``.

Results are named the same way from ``Compiled.out_tree`` (:func:`output_paths`: ``output['w1']``,
``output[0]['w1']`` for the first element of a returned tuple), flat result ``k`` being the entry root's
element ``k``; which argument leaves were donated comes from ``Compiled.args_info`` (:func:`donated_leaves`).

Optimizer state is told by the pytree's node types: a leaf is optimizer state when a node on its path is a
type defined in ``optax`` (``ScaleByAdamState``, ``EmptyState``...) or is flax's ``nnx.Optimizer`` /
``OptState``, or when a dict key or attribute on its path is named ``opt_state``.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import re
from typing import Any

__all__ = ["ArgumentLeaf", "argument_leaves", "donated_leaves", "output_paths"]

_OPTIMIZER_MODULES = ("optax",)
_OPTIMIZER_TYPES = ("Optimizer", "OptState", "OptArray", "OptVariable")
_OPTIMIZER_KEYS = ("opt_state",)
_OPTIMIZER_KEY_IN = re.compile("|".join(map(re.escape, _OPTIMIZER_KEYS))).search  # one of them in a text


@dataclasses.dataclass(frozen=True)
class ArgumentLeaf:
    """One flat argument leaf: ``path`` as JAX prints it (``args[0]['l1']['kernel']`` or, with the
    function's parameter names, ``params['l1']['kernel']``), ``optimizer_state`` by the rule above;
    ``graph``: the path is a flax.nnx graph path, which names the leaf better than the position JAX records
    in the parameter's op name (``model.states[0][3]``)."""

    index: int
    path: str
    optimizer_state: bool
    graph: bool = False


_OPTIMIZER_CLASSES: dict[type, bool] = {}  # a node's type -> whether it is an optimizer node (asked per node)


def _is_optimizer_node(node: Any) -> bool:
    cls = type(node)
    found = _OPTIMIZER_CLASSES.get(cls)
    if found is None:
        module = (getattr(cls, "__module__", "") or "").split(".")[0]
        found = module in _OPTIMIZER_MODULES or (module == "flax" and cls.__name__ in _OPTIMIZER_TYPES)
        if len(_OPTIMIZER_CLASSES) < 4096:
            _OPTIMIZER_CLASSES[cls] = found
    return found


def _key_text(key: Any) -> str:
    """``jax.tree_util.keystr((key,))`` (``['w']``, ``[0]``, ``.mu``): the key's own ``str``, which keystr joins
    (jaxlib's keys print in C++: 0.1 µs, less than any memo of them costs)."""
    return str(key)


def _names(fn: Any, count: int, static: frozenset[int] = frozenset()) -> list[str] | None:
    """The names of the positional parameters of the function a jit wraps that are not static (JAX leaves static
    arguments out of ``in_tree``), when they can be read."""
    import inspect

    target = getattr(fn, "__wrapped__", fn)
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    named = len(names)
    var_pos = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    if var_pos is not None:  # f(x, *rest): the extra positional arguments are rest[0], rest[1]... (as recompiles say)
        names += [f"{var_pos}[{i}]" for i in range(max(0, count + len(static) - named))]
    names = [n for i, n in enumerate(names) if i not in static]
    return names[:count] if len(names) >= count else None


def _keyword_name(fn: Any, key: Any) -> str:
    """A keyword argument's name as JAX's argument paths give it: ``kw['e']`` when it lands in ``**kw``."""
    import inspect

    try:
        params = inspect.signature(getattr(fn, "__wrapped__", fn)).parameters
    except (TypeError, ValueError):
        return str(key)
    var_kw = next((p.name for p in params.values() if p.kind == p.VAR_KEYWORD), None)
    named = key in params and params[key].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                    inspect.Parameter.KEYWORD_ONLY)
    return f"{var_kw}[{key!r}]" if var_kw is not None and not named else str(key)


def _static(fn: Any, example: tuple[tuple, dict] | None) -> frozenset[int]:
    """Positions of ``fn``'s static positional arguments (:func:`xlakit._jax.static_args.static_positions`),
    counted against the example call's arguments when given, else against the signature's positional
    parameters."""
    if fn is None:
        return frozenset()
    import inspect

    from xlakit._jax.static_args import static_positions

    if example is not None:
        return static_positions(fn, len(example[0]))
    try:
        params = inspect.signature(getattr(fn, "__wrapped__", fn)).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    return static_positions(fn, sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params))


def _dynamic(args: tuple, static: frozenset[int]) -> tuple:
    """``args`` without the static ones (as ``in_tree`` holds them)."""
    return tuple(a for i, a in enumerate(args) if i not in static) if static else args


def _node_leaves(node: Any) -> list | None:
    """The flat leaves of the ``NodeStates`` nnx.jit made of one graph node (its one state's list), or None when
    ``node`` is not one or has another layout (several state filters)."""
    cls = type(node)
    if cls.__name__ != "NodeStates" or not (getattr(cls, "__module__", "") or "").startswith("flax."):
        return None
    states = getattr(node, "states", None)
    if not (isinstance(states, tuple) and len(states) == 1 and isinstance(states[0], list)):
        return None
    return states[0]


def _graph_value(node: Any, given: Any) -> Any:
    """The graph node (an nnx module, optimizer) whose ``NodeStates`` nnx.jit made ``node``: ``given`` (the example
    call's argument) when known, else rebuilt from ``node``'s own ``GraphDef`` with its placeholder leaves — a
    Lowered or Compiled of an ``nnx.jit`` step keeps the graph definition but not the call's objects, and without
    it the optimizer's moments read as parameters named ``optimizer.states[0][2]`` (a researcher's trial,
    2026-12-07). None when ``node`` is not a NodeStates or flax cannot rebuild it."""
    if given is not None:
        return given
    leaves = _node_leaves(node)
    if leaves is None:
        return None
    try:
        from flax import nnx

        return nnx.graph.unflatten(node.graphdef, list(leaves))
    except Exception:  # noqa: BLE001 - another flax layout: the positional names stay
        return None


def _graph_paths(node: Any, value: Any) -> list[str] | None:
    """For the ``NodeStates`` nnx.jit made of the graph node ``value``: the text of each flat leaf's graph path
    (``['block']['attn']['qkv']['kernel']``), in the order of ``node.states[0]``; None when ``node`` is not
    one, or the paths cannot be matched leaf for leaf (several state filters, a node shared between
    arguments, another flax layout)."""
    leaves = _node_leaves(node)
    if leaves is None:
        return None
    try:
        from flax import nnx

        _graphdef, flat = nnx.graph.flatten(value, with_paths=True)
        paths = [path for path, _leaf in flat]
    except Exception:  # noqa: BLE001 - not a graph node flax can flatten: keep the positional names
        return None
    if len(paths) != len(leaves) or not all(isinstance(i, int) for i in leaves):
        return None
    return ["".join(f"[{k!r}]" if isinstance(k, str) else f"[{k}]" for k in path) for path in paths]


def argument_leaves(compiled: Any, fn: Any = None, example: tuple[tuple, dict] | None = None
                    ) -> dict[int, ArgumentLeaf]:
    """Entry parameter number -> :class:`ArgumentLeaf` for a ``jax.stages.Compiled``; ``{}`` when the tree or
    the kept-leaf record is unavailable (then the caller falls back to the parameters' own op names).

    ``fn``: the jitted function, to print ``params[...]`` instead of ``args[0][...]``. ``example``: the
    ``(args, kwargs)`` it was compiled with, to name the leaves of flax.nnx graph nodes under ``nnx.jit``.
    """
    import jax

    tree = getattr(compiled, "in_tree", None)
    if tree is None:
        return {}
    counter = None  # placeholders are their flat index; else JAX's ArgInfo leaves, counted in flat order
    try:
        skeleton = jax.tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
    except Exception:  # noqa: BLE001 - a node that validates its fields (a flax.struct checking shapes) refuses ints
        skeleton = getattr(compiled, "args_info", None)  # the same tree, built by JAX with ArgInfo leaves
        if skeleton is None:
            return {}
        counter = itertools.count()

    def flat_index(leaf: Any) -> int | None:
        if counter is None:
            return leaf if isinstance(leaf, int) and not isinstance(leaf, bool) else None
        return next(counter) if hasattr(leaf, "donated") and not _is_optimizer_node(leaf) else None

    args, kwargs = skeleton if isinstance(skeleton, tuple) and len(skeleton) == 2 else (skeleton, {})
    static = _static(fn, example)
    names = _names(fn, len(args), static) if fn is not None and isinstance(args, tuple) else None
    leaves: list[ArgumentLeaf] = []

    def walk(node: Any, prefix: str, under_optimizer: bool) -> None:
        flat, _ = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node and _is_optimizer_node(x))
        for path, leaf in flat:
            text = prefix + "".join(map(str, path))  # keystr(path)
            # a key named opt_state is in the path's text: most paths need no look at their parts
            inside = under_optimizer or (_OPTIMIZER_KEY_IN(text) is not None and any(
                str(part).strip("[]'.\"") in _OPTIMIZER_KEYS for part in path))
            index = leaf if type(leaf) is int and counter is None else flat_index(leaf)  # (a placeholder: most)
            if index is not None:
                leaves.append(ArgumentLeaf(index, text, inside))
            else:  # an optimizer node: its leaves are optimizer state
                walk(leaf, text, True)

    top = [(names[i] if names else f"args[{i}]", a) for i, a in enumerate(args)] if isinstance(args, tuple) else []
    dynamic = _dynamic(example[0], static) if example is not None else None
    given = dynamic if dynamic is not None and len(dynamic) == len(top) else None
    for i, (prefix, arg) in enumerate(top):
        value = _graph_value(arg, given[i] if given is not None else None) if counter is None else None
        graph = _graph_paths(arg, value) if value is not None else None
        index = flat_index(arg)
        if index is not None:
            leaves.append(ArgumentLeaf(index, prefix, False))
        elif graph is not None:
            optimizer = _is_optimizer_node(value)
            leaves += [ArgumentLeaf(index, prefix + path, optimizer or "['opt_state']" in path, graph=True)
                       for index, path in zip(arg.states[0], graph, strict=True)]
        else:
            walk(arg, prefix, _is_optimizer_node(arg))
    for key, arg in (kwargs.items() if isinstance(kwargs, dict) else ()):
        index = flat_index(arg)
        name = _keyword_name(fn, key) if fn is not None else str(key)
        if index is not None:
            leaves.append(ArgumentLeaf(index, name, False))
        else:
            walk(arg, name, _is_optimizer_node(arg))
    leaves.sort(key=operator.attrgetter("index"))
    kept = getattr(getattr(compiled, "_executable", None), "_kept_var_idx", None)
    if kept is None:
        return dict(enumerate(leaves))  # the caller checks the count against the entry parameters
    order = sorted(map(int, kept))
    if leaves and leaves[0].index == 0 and leaves[-1].index == len(leaves) - 1:  # distinct flat indices: 0..n-1
        return {p: leaves[i] for p, i in enumerate(order) if 0 <= i < len(leaves)}
    by_index = {leaf.index: leaf for leaf in leaves}
    return {p: by_index[i] for p, i in enumerate(order) if i in by_index}


def output_paths(compiled: Any, fn: Any = None, example: tuple[tuple, dict] | None = None) -> list[str]:
    """The text of each flat result's pytree path, ``output`` first (``output['w1']``, ``output[0][1]``), in
    the order of ``Compiled.out_tree``'s leaves; ``[]`` when the tree is unavailable.

    Under ``nnx.jit`` (``fn`` a flax.nnx jit wrapper, ``example`` its ``(args, kwargs)``) the program returns
    ``(the graph nodes' new states, the keyword nodes' new states, the function's result)``: a graph node's new
    state is named by its graph path with `` (new)`` (``model['blocks'][0]['up']['kernel'] (new)``, see
    :func:`argument_leaves`), the function's result ``output...`` as for ``jax.jit``; not
    ``output[0][1].states[0][103]``."""
    import jax

    tree = getattr(compiled, "out_tree", None)
    if tree is None:
        return []
    try:
        skeleton = jax.tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
        flat, _ = jax.tree_util.tree_flatten_with_path(skeleton)
    except Exception:  # noqa: BLE001 - a node that validates its fields refuses int placeholders: JAX's own tree
        try:
            flat = [(path, i) for i, (path, _leaf) in
                    enumerate(jax.tree_util.tree_flatten_with_path(compiled.out_info)[0])]
            skeleton = None
        except Exception:  # noqa: BLE001 - no out_info either: no paths
            return []
        if len(flat) != tree.num_leaves:
            return []
    texts = ["output" + "".join(map(str, path)) for path, _leaf in flat]  # "output" + keystr(path)
    if skeleton is not None and hasattr(fn, "_get_pure_args_kwargs"):
        static = _static(fn, example)
        given = _dynamic(example[0], static) if example is not None else None
        names = dict(zip((leaf for _path, leaf in flat), texts, strict=True))
        names.update(_nnx_output_names(skeleton, fn, given, static))
        return [names[leaf] for _path, leaf in flat]
    return texts


def _nnx_output_names(skeleton: Any, fn: Any, args: tuple | None, static: frozenset[int] = frozenset()
                      ) -> dict[int, str]:
    """Flat result index -> name, for the ``(args_out, kwargs_out, out)`` an ``nnx.jit`` program returns;
    ``{}`` when the results do not have that shape. ``args``: the call's dynamic arguments, or None (a Lowered or
    Compiled: each graph node is rebuilt from its own ``GraphDef``, :func:`_graph_value`)."""
    import jax

    if not (isinstance(skeleton, tuple) and len(skeleton) == 3 and isinstance(skeleton[0], tuple)
            and (args is None or len(skeleton[0]) == len(args))):
        return {}
    names: dict[int, str] = {}
    arg_names = _names(fn, len(skeleton[0]), static)
    for i, node in enumerate(skeleton[0]):
        value = _graph_value(node, args[i] if args is not None else None)
        graph = _graph_paths(node, value) if value is not None else None
        if graph is not None:
            prefix = arg_names[i] if arg_names else f"args[{i}]"
            names.update({leaf: f"{prefix}{path} (new)" for leaf, path in zip(node.states[0], graph, strict=True)})
    flat, _ = jax.tree_util.tree_flatten_with_path(skeleton[2])
    names.update({leaf: "output" + "".join(map(str, path)) for path, leaf in flat})
    return names


def donated_leaves(compiled: Any) -> list[bool] | None:
    """For each flat argument leaf (``in_tree`` order), whether the caller donated it (``donate_argnums`` /
    ``donate_argnames``), from ``Compiled.args_info``; None when JAX does not say."""
    import jax

    try:
        infos = jax.tree_util.tree_leaves(compiled.args_info)
    except Exception:  # noqa: BLE001 - a Compiled without args_info (a deserialized executable)
        return None
    flags = [getattr(info, "donated", None) for info in infos]
    return None if any(f is None for f in flags) else [bool(f) for f in flags]
