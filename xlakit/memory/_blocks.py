"""Which block of a model made a value: ``blocks[2]`` for a layer list, read from the parameters it was made
from, where the name stack does not say it.

flax.nnx (and plain JAX) put no module path in the name stack, so four blocks called in a Python loop have the
same op names and the same stack frames: their values merge into one "layer". What tells them apart is the data
flow: block 2's values are made from ``model['blocks'][2]``'s parameters and go on to ops that read them. So an
instruction of the entry computation is in block *k* when *k* is the one block whose parameters are read both
upstream of it (by it, or by an instruction of its pass — forward, backward, or neither — that it depends on)
and downstream of it (by it, or by an instruction of its pass that depends on it): it lies between two reads of
that block's parameters. An instruction at the seam of two blocks (a layer norm's mean before the block's first
parameter, a bias-free residual add after its last) has no such block and gets none; so does one that reads two
blocks' parameters (shared weights). Nothing is guessed. Checked against the name stack of the same models
traced with each block under ``jax.named_scope`` (which this rule never reads): a 4-block flax.nnx transformer
train step with adam, 220 of its 475 non-argument buffers in the blocks named, 77 % of their bytes, none wrong
(``benchmarks/memory_blocks.py``); a 4-block MLP gradient, 45 of 137 (78 % of the bytes), none wrong
(``tests/test_memory_blocks.py``).

Only entries of a layer list are blocks (:func:`layer_blocks`): a container with at least two entries of the same
structure — the same paths below the index, or for arrays the same shape. An input batch ``(x, y)`` of two shapes,
optax's state tuple and a one-element list name no block (a batch ``(x, y)`` of one shape still would: its two
entries look alike).

A ``lax.scan`` over stacked layers keeps one buffer for every iteration's value (``dynamic-update-slice`` into
a stack): such a buffer is "all N iterations (stacked)", which the attribution marks from the stacked value.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["block_of_path", "layer_blocks", "name_blocks", "add_blocks"]

_PAIR = re.compile(r"\['([^'\]]+)'\]\[(\d+)\]|\.([A-Za-z_]\w*)\[(\d+)\]|^([A-Za-z_]\w*)\[(\d+)\]")
# A leading ``name[i]`` is an argument that is itself the layer list (``blocks[0].w1`` of ``loss(blocks, x)``),
# except JAX's names for positional arguments and results, whose index is no layer.
_NOT_LAYER_LISTS = frozenset({"args", "output"})
_OPTIMIZER_CONTAINERS = frozenset({"opt_state"})  # optax's state tuple: not a layer list
_SKIPPED = _OPTIMIZER_CONTAINERS | _NOT_LAYER_LISTS
# Ops that pass a parameter on unchanged in meaning (a broadcast scale, a bitcast kernel): looked through.
_CARRIERS = frozenset({"bitcast", "broadcast", "convert", "reshape", "copy", "transpose", "get-tuple-element",
                       "bitcast-convert"})


@functools.lru_cache(maxsize=65536)
def block_of_path(path: str | None) -> str | None:
    """``"model['blocks'][2]['up']['kernel']"`` -> ``"blocks[2]"``; every indexed container on the path, outer
    first (``"stages[1]/blocks[0]"``), optax's ``opt_state[0]`` skipped; None without one."""
    if not path or "[" not in path:  # every indexed container has a "["
        return None
    return _path_pairs(path)[0]


@functools.lru_cache(maxsize=65536)
def _path_pairs(path: str) -> tuple[str | None, int]:
    """(:func:`block_of_path`, where the last pair it names ends on ``path``: 0 without one), from one
    pass over its pairs: thousands of argument paths, each read once."""
    pairs = [m for m in _PAIR.finditer(path) if (m[1] or m[3] or m[5]) not in _SKIPPED]
    return "/".join(f"{m[1] or m[3] or m[5]}[{m[2] or m[4] or m[6]}]" for m in pairs) or None, \
        pairs[-1].end() if pairs else 0


def layer_blocks(arguments: Sequence[tuple[str, Any]]) -> frozenset[str]:
    """The block names (:func:`block_of_path`) of ``arguments`` (``(pytree path, shape)``) that are entries of a
    layer list: at least two entries of one container hold the same structure — the same paths below the index
    and, where an entry is itself an array, the same shape. The input batch ``(x, y)``, a one-element list or
    entries that differ are no blocks: nothing there to tell apart (JupyterLab trial: ``batch[0]`` led layers)."""
    signatures: dict[str, set[tuple[str, Any]]] = {}
    for path, shape in arguments:
        block, end = _path_pairs(path) if "[" in path else (None, 0)
        if block:
            rest = path[end:]
            signatures.setdefault(block, set()).add((rest, None if rest else tuple(shape or ())))
    keys = {block: (_SIBLING.sub("[*]", block), frozenset(signature)) for block, signature in signatures.items()}
    siblings: dict[tuple[str, frozenset], int] = {}
    for key in keys.values():
        siblings[key] = siblings.get(key, 0) + 1
    return frozenset(b for b, key in keys.items() if siblings[key] >= 2)


_SIBLING = re.compile(r"\[\d+\]$")  # a block's own index, the last: its siblings differ only there


def _kept(block: str | None, kept: frozenset[str]) -> str | None:
    return block if block in kept else None


def name_blocks(mod: Any, parameter_paths: Mapping[int, str], phase_of: Callable[[int], str],
                layers: frozenset[str] | None = None) -> dict[int, str]:
    """Instruction id -> its block (``"blocks[2]"``) for the entry computation's instructions that lie between
    two reads of one block's parameters (see the module docstring); ``{}`` when no parameter path has an index
    (nothing to tell apart, nothing searched).

    Args:
      mod: the decoded HLO module (``instructions``, ``computations``, ``entry_id``).
      parameter_paths: entry parameter instruction id -> its pytree path.
      phase_of: instruction id -> ``"forward"``, ``"backward"`` or ``""`` (the name stack's phase).
      layers: where given, the only block names kept (:func:`layer_blocks`).
    """
    blocks = {iid: block_of_path(path) or "" for iid, path in parameter_paths.items()}
    if layers is not None:  # only the blocks of a layer list (see layer_blocks)
        blocks = {iid: b if b in layers else "" for iid, b in blocks.items()}
    if not any(blocks.values()):
        return {}
    # A set of blocks is an int with one bit per block (a parameter outside every block reads none): unions and
    # intersections of thousands of instructions' sets are then single integer operations.
    names = sorted({b for b in blocks.values() if b})
    bit = {b: 1 << k for k, b in enumerate(names)}
    param_bits = {iid: bit.get(b, 0) for iid, b in blocks.items()}
    _name, order, _root = mod.computations[mod.entry_id]
    instructions = getattr(mod.instructions, "known", None) or mod.instructions
    phase = list(map(phase_of, order))
    at = {iid: k for k, iid in enumerate(order)}  # instruction id -> its position in the entry's order
    n = len(order)
    # upstream: blocks read by the instruction or any instruction of its phase it depends on; downstream: read by
    # it or any instruction of its phase that depends on it. The schedule is a topological order of the entry, so
    # one pass in order gives reads and upstream (and each instruction's readers of its phase, for downstream).
    reads = [0] * n  # the blocks whose parameters an instruction reads, looking through carriers
    carry = [0] * n  # what an operand adds to its reader's reads: a parameter's block, a carrier's reads
    up = [0] * n  # 0 for a parameter: its block goes up only as what its readers read, and it is never named
    same: list[list[int]] = [[] for _ in order]  # readers later in the order, of the same phase
    named = [False] * n  # may be named: neither a parameter nor a carrier
    position, bits_of = at.get, param_bits.get
    for iid, bits in param_bits.items():
        if iid in at:
            reads[at[iid]] = carry[at[iid]] = bits
    for k, iid in enumerate(order):
        ins = instructions[iid]
        if not ins.operands and iid in param_bits:  # read and carried as filled above
            continue
        mine = phase[k]
        found = above = 0
        for op in ins.operands:
            j = position(op)
            if j is None:  # not in the entry's order
                found |= bits_of(op) or 0
                continue
            found |= carry[j]
            if j < k and phase[j] == mine:
                above |= up[j]
                same[j].append(k)
        if iid in param_bits:
            continue
        reads[k] = found
        up[k] = found | above
        if ins.opcode in _CARRIERS:
            carry[k] = found
        else:
            named[k] = True
    down = reads  # filled in place, last first
    for k in range(n - 1, -1, -1):
        found = down[k]
        for u in same[k]:
            found |= down[u]
        down[k] = found
    out = {}
    for k, iid in enumerate(order):
        both = up[k] & down[k]
        if both and not both & (both - 1) and named[k]:
            out[iid] = names[both.bit_length() - 1]
    return out


def add_blocks(cols: dict[str, list[Any]], where: Sequence[Any], apart: Mapping[int, tuple[list[int], bool]],
               mod: Any, param_paths: dict[int, str], phase_of: Callable[[int], str] | None = None,
               copies: Mapping[int, int] | None = None) -> None:
    """Fill each row's ``block`` (:mod:`xlakit.memory._blocks`: ``blocks[2]`` from the parameters a value is
    made from, a parameter's from its path, a scan's stacked value ``all N iterations (stacked)``) and put it
    in front of the layer (``blocks[2] › Block.__call__ › self.attn(x)``), so four blocks called in a loop are
    four layers, not one. ``cols``: the buffer table as column lists
    (:data:`xlakit.memory.attribution.BUFFER_COLUMNS`); ``where``: each row's instruction id, its one position
    unless ``apart`` has the row (its positions, and whether it is a scan's stacked value); ``phase_of``:
    instruction id -> its phase (default: read from its op name); ``copies``: row -> the argument instruction
    a row is XLA's copy of (its block is that argument's: in a trial, 2026-12-07, such copies of blocks'
    kernels fell in "(no block told apart)")."""
    from xlakit.memory._hlo_frames import parse_op_name

    if phase_of is None:
        def phase_of(iid: int) -> str:
            return parse_op_name(mod.instructions[iid].op_name).phase

    layers, parameters, shapes = cols["layer"], cols["parameter"], cols["shape"]
    kept = layer_blocks([(p, shape) for p, shape, layer in zip(parameters, shapes, layers, strict=True)
                         if layer == "argument" and p])
    named = name_blocks(mod, param_paths, phase_of, kept)
    get = named.get
    # an argument's block is its path's (where that is a layer list's), and its layer stays "argument"
    blocks = cols["block"] = [_kept(block_of_path(parameter), kept) if layer == "argument" else get(iid)
                              for iid, layer, parameter in zip(where, layers, parameters, strict=True)]
    for i, (positions, stacked) in apart.items():  # a buffer at several positions, or a scan's stacked value
        if layers[i] == "argument":
            continue
        block = None
        for p in positions:
            block = get(p)
            if block is not None:
                break
        if block is None and stacked and shapes[i]:
            block = f"all {shapes[i][0]} iterations (stacked)"
        if block is None and copies and i in copies:
            block = _kept(block_of_path(param_paths.get(copies[i], "")), kept)
        blocks[i] = block
    cols["layer"] = [layer if not block or layer == "unknown" or layer == "argument" else f"{block} › {layer}"
                     for block, layer in zip(blocks, layers, strict=True)]
