"""The user's terms for one HLO instruction: its source stack (from the module's stack frame index) and its
JAX name stack (from ``OpMetadata.op_name``).

Stack frames: ``HloModuleProto.stack_frame_index`` (field 17, ``StackFrameIndexProto``) holds four tables —
file names, function names, file locations (``file_name_id``, ``function_name_id``, ``line``, ``column``,
``end_line``, ``end_column``) and stack frames (``file_location_id``, ``parent_frame_id``) — all ids 1-based,
0 meaning none. An instruction's ``OpMetadata.stack_frame_id`` (field 15) names its innermost frame; following
``parent_frame_id`` gives the call chain out to the ``jax.jit`` call. Checked on jaxlib 0.10.2 against
``hlo_modules()[0].to_string()``, whose ``FileLocations`` section prints the same numbers.

Name stack: JAX writes ``jit(step)/transpose(jvp(MLP))/Dense_0/dot_general``: transformations wrap the names
of the scopes they were applied under (``jvp(...)`` = the forward pass of a gradient, ``transpose(...)`` = its
backward pass), ``jax.named_scope`` / flax linen / haiku / equinox add plain path parts, and the last part is
the primitive. A value JAX recomputes for the backward pass of a ``jax.checkpoint`` (remat) is traced under
``.../transpose(...)/.../rematted_computation/...`` (``jax._src.ad_checkpoint`` extends the name stack so).
When XLA merges instructions (fusion, CSE) it joins their op names with ``;``; the first is the
instruction's own.
"""

from __future__ import annotations

import dataclasses
import functools
import linecache

from xlakit._sources import Frame, display_file, first_user_frame, library_package
from xlakit.memory._proto import Message

__all__ = ["FrameTable", "NameStack", "parse_op_name", "layer_of", "source_of", "RECOMPUTED_SCOPE", "SCOPE_WORDS"]

#: The scope of a value recomputed for the backward pass (``NameStack.recomputed``).
RECOMPUTED_SCOPE = "recomputed in the backward pass (remat)"
_REMAT_MARK = "rematted_computation"  # jax._src.ad_checkpoint's name-stack part for the recomputation
#: Name-stack parts JAX adds inside its own functions, in the user's words (a scope shows these in place of
#: them): ``lax.scan`` and ``lax.while_loop`` lower to ``while`` with a ``body`` and a ``cond``; scan writes each
#: iteration's output into the stacked result (``dynamic_update_index_in_dim``), reads each iteration's slice of
#: its inputs (``dynamic_index_in_dim``) and calls the body (``closed_call``, no word of its own).
SCOPE_WORDS = {("while", "body"): "loop body", ("while", "cond"): "loop condition",
               ("dynamic_update_index_in_dim",): "stacked per iteration",
               ("dynamic_index_in_dim",): "sliced per iteration", ("closed_call",): "",
               ("_take",): "jnp.take / indexing", ("_where",): "jnp.where"}

# StackFrameIndexProto / .FileLocation / .StackFrame field numbers (xla/service/hlo.proto)
_FILES, _FUNCTIONS, _LOCATIONS, _FRAMES = 1, 2, 3, 4
_LOC_FILE, _LOC_FUNCTION, _LOC_LINE, _LOC_COLUMN, _LOC_END_LINE, _LOC_END_COLUMN = 1, 2, 3, 4, 5, 6
_FR_LOCATION, _FR_PARENT = 1, 2


@dataclasses.dataclass(frozen=True)
class SourceFrame(Frame):
    """A :class:`~xlakit._sources.Frame` plus where the expression ends (1-based line and column, 0 =
    unknown), so the exact call (``self.l1(x)``) can be read back from the file."""

    end_line: int = 0
    end_column: int = 0


class FrameTable:
    """The decoded stack frame index of one module; :meth:`chain` gives a frame id's stack, innermost first."""

    def __init__(self, index: Message | None) -> None:
        self.files: list[str] = []
        self.functions: list[str] = []
        self._locations: list[tuple[int, int, int, int, int, int]] = []
        self._frames: list[tuple[int, int]] = []
        if index is None:
            return
        self.files = [self._text(v) for v in index._fields.get(_FILES, ())]
        self.functions = [self._text(v) for v in index._fields.get(_FUNCTIONS, ())]
        for loc in index.messages(_LOCATIONS):
            self._locations.append((loc.int(_LOC_FILE), loc.int(_LOC_FUNCTION), loc.int(_LOC_LINE),
                                    loc.int(_LOC_COLUMN), loc.int(_LOC_END_LINE), loc.int(_LOC_END_COLUMN)))
        self._frames = [(fr.int(_FR_LOCATION), fr.int(_FR_PARENT)) for fr in index.messages(_FRAMES)]
        self._chains: dict[int, tuple[SourceFrame, ...]] = {}

    @staticmethod
    def _text(value: int | bytes) -> str:
        return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else ""

    def __bool__(self) -> bool:
        return bool(self._frames)

    def _frame(self, location_id: int) -> SourceFrame | None:
        if not 0 < location_id <= len(self._locations):
            return None
        file_id, fn_id, line, col, end_line, end_col = self._locations[location_id - 1]
        file = self.files[file_id - 1] if 0 < file_id <= len(self.files) else ""
        fn = self.functions[fn_id - 1] if 0 < fn_id <= len(self.functions) else ""
        # XLA stores Python's 0-based column offsets; Frame's columns are 1-based (0 = unknown).
        return SourceFrame(file, line, fn, col + 1 if line else 0, end_line, end_col + 1 if end_line else 0)

    def chain(self, frame_id: int) -> tuple[SourceFrame, ...]:
        """The stack of ``frame_id``, innermost frame first; ``()`` for 0 or an id outside the table."""
        if frame_id in self._chains:
            return self._chains[frame_id]
        out: list[SourceFrame] = []
        seen: set[int] = set()
        fid = frame_id
        while 0 < fid <= len(self._frames) and fid not in seen:  # a cycle would be a malformed table
            seen.add(fid)
            location_id, parent = self._frames[fid - 1]
            frame = self._frame(location_id)
            if frame is not None:
                out.append(frame)
            fid = parent
        chain = self._chains[frame_id] = tuple(out)
        return chain


@dataclasses.dataclass(frozen=True)
class NameStack:
    """An op name split into parts. ``phase``: ``"forward"`` (under ``jvp``, not ``transpose``),
    ``"backward"`` (under ``transpose``) or ``""`` (no differentiation, or no op name). ``names``: the scope
    names (named scopes, module paths, names inside transformations) outermost first. ``primitive``: the last
    part (``dot_general``), ``""`` when unknown. ``transforms``: the transformation names seen
    (``jit``, ``jvp``, ``transpose``, ``vmap``, ``checkpoint``...). ``recomputed``: the op recomputes a
    forward-pass value in the backward pass (JAX's ``rematted_computation`` scope of a ``jax.checkpoint``);
    that marker is not among ``names``."""

    phase: str
    names: tuple[str, ...]
    primitive: str
    transforms: tuple[str, ...]
    recomputed: bool = False

    @functools.cached_property
    def scope(self) -> str:
        """``"backward › MLP/Dense_0"``, ``"forward"``, ``"MLP/l1"``, ``"recomputed in the backward pass (remat)
        › MLP/checkpoint"``, ``"forward › loop body › stacked per iteration"`` (a ``lax.scan``) (JAX's own
        parts in words, :data:`SCOPE_WORDS`); ``"(no named scope)"`` for an op traced outside every
        ``jax.named_scope``, module and transform (a trial read "(top level)" as jargon); ``"unknown"`` without an
        op name."""
        if not (self.phase or self.names or self.primitive or self.recomputed):
            return "unknown"
        path = _scope_path(self.names)
        phase = RECOMPUTED_SCOPE if self.recomputed else self.phase
        if phase and path:
            return f"{phase} › {path}"
        return phase or path or "(no named scope)"


def _scope_path(names: tuple[str, ...]) -> str:
    """The scope names as shown: the user's own parts joined by ``/`` (``MLP/Dense_0``), JAX's internal ones
    (:data:`SCOPE_WORDS`) as words of their own, joined by `` › ``."""
    segments: list[str] = []
    user: list[str] = []
    i = 0
    while i < len(names):
        pair, one = tuple(names[i:i + 2]), (names[i],)
        key = pair if pair in SCOPE_WORDS else one if one in SCOPE_WORDS else None
        if key is None:
            user.append(names[i])
            i += 1
            continue
        if user:
            segments.append("/".join(user))
            user = []
        if SCOPE_WORDS[key]:
            segments.append(SCOPE_WORDS[key])
        i += len(key)
    if user:
        segments.append("/".join(user))
    return " › ".join(segments)


def _split(op_name: str) -> list[str]:
    """Split on ``/`` outside parentheses: ``jit(f)/transpose(jvp(a/b))/c`` -> 3 parts."""
    if "(" not in op_name:  # no parentheses (an argument's path, a plain name stack): every ``/`` splits
        return [p for p in op_name.split("/") if p]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(op_name):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif ch == "/" and depth == 0:
            parts.append(op_name[start:i])
            start = i + 1
    parts.append(op_name[start:])
    return [p for p in parts if p]


def _unwrap(part: str, transforms: list[str], names: list[str]) -> None:
    """``transpose(jvp(MLP))`` -> transforms += [transpose, jvp], names += [MLP] (inner paths split too)."""
    while part.endswith(")") and "(" in part:
        head, inner = part.split("(", 1)
        if not head.replace("_", "").isalnum():
            break
        transforms.append(head)
        part = inner[:-1]
        if "/" in part:
            inner_parts = _split(part)
            for p in inner_parts:
                _unwrap(p, transforms, names)
            return
    if part:
        names.append(part)


@functools.lru_cache(maxsize=65536)
def parse_op_name(op_name: str) -> NameStack:
    """Split JAX's op name (``jit(step)/transpose(jvp(MLP))/Dense_0/dot_general``) into a :class:`NameStack`.
    The outermost ``jit(<fn>)`` is dropped (it is the program itself); an empty op name gives an unknown
    stack (all fields empty). Of op names XLA joined with ``;`` (merged instructions) the first is read."""
    own = op_name.split(";", 1)[0]
    if "/" not in own and "(" not in own:  # one plain part (an argument's path): the primitive alone
        return NameStack("", (), own, ())
    parts = _split(own)
    if not parts:
        return NameStack("", (), "", ())
    primitive = parts.pop() if len(parts) > 1 or "(" not in parts[0] else ""
    if parts and parts[0].startswith(("jit(", "pjit(")):
        parts.pop(0)
    transforms: list[str] = []
    names: list[str] = []
    for part in parts:
        _unwrap(part, transforms, names)
    phase = "backward" if "transpose" in transforms else "forward" if "jvp" in transforms else ""
    recomputed = phase == "backward" and _REMAT_MARK in names
    kept = tuple(n for n in names if n != _REMAT_MARK) if recomputed else tuple(names)
    return NameStack(phase, kept, primitive, tuple(transforms), recomputed)


@functools.lru_cache(maxsize=4096)
def _expression(file: str, line: int, column: int, end_line: int, end_column: int) -> str:
    """The source text from (line, column) to (end_line, end_column), 1-based, when it is one line and the
    file (or notebook cell, which IPython puts in ``linecache``) can still be read; else ``""``."""
    if not (line and column and end_line == line and end_column > column):
        return ""
    text = linecache.getline(file, line)
    return text[column - 1:end_column - 1].strip() if text else ""


def user_frame(chain: tuple[SourceFrame, ...]) -> SourceFrame | None:
    """The first user frame of a stack (frames inside jax/flax/optax and Python skipped), or None where the stack
    passes through xlakit itself first: that frame is the line that called xlakit (``peak(f, x)``, which traced
    ``f``), not a line of the program — an op JAX made while lowering (a closed-over constant broadcast) has
    no line of the user's function, and is "unknown", never the caller's line."""
    frame = first_user_frame(chain)
    if not isinstance(frame, SourceFrame):
        return None
    for inner in chain:
        if inner is frame:
            return frame
        if library_package(inner.file) == "xlakit":
            return None
    return frame


def layer_of(frame: SourceFrame | None) -> str:
    """``MLP.__call__ › self.l1(x)``: the user function and the call on that line; the function alone when
    the source cannot be read; ``"unknown"`` without a frame."""
    if frame is None:
        return "unknown"
    expr = _expression(frame.file, frame.line, frame.column, frame.end_line, frame.end_column)
    fn = frame.function or "?"
    return f"{fn} › {expr}" if expr else fn


def source_of(frame: SourceFrame | None, names: dict[str, str] | None = None) -> str:
    """``model.py:42 (MLP.__call__)`` / ``cell [7], line 3 (MLP.__call__)``: the line (the call on it is in
    :func:`layer_of`); ``"unknown"`` without a frame. ``names``: a memo of file names, as for
    :func:`stack_text`."""
    if frame is None:
        return "unknown"
    name = names.get(frame.file) if names is not None else None
    if name is None:
        name = display_file(frame.file)
        if names is not None:
            names[frame.file] = name
    where = f"{name}, line {frame.line}" if name.startswith("cell [") else f"{name}:{frame.line}"
    return f"{where} ({frame.function})" if frame.function else where


def stack_text(chain: tuple[SourceFrame, ...], names: dict[str, str] | None = None) -> str:
    """The whole stack, innermost first, one ``file:line (function)`` per line; ``""`` when empty.
    ``names``: a memo of :func:`~xlakit._sources.display_file` for one attribution (a module has few files
    and thousands of frames)."""
    names = {} if names is None else names
    out = []
    for f in chain:
        shown = names.get(f.file)
        if shown is None:
            shown = names[f.file] = display_file(f.file)
        out.append(f"{shown}:{f.line} ({f.function})")
    return "\n".join(out)
