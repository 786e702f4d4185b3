"""Recompiles explained: each retrace of a function seen before, with what changed against what is compiled.

Read at trace time only: JAX reports ``/jax/core/compile/jaxpr_trace_duration`` when it has traced a function
for ``jit`` because its tracing cache missed (a call JAX's caches answer runs no Python here at all, so the
hot path is untouched). At that moment JAX's ``pjit._trace_for_jit`` frame is on the stack with the function
(``fun``), its jit options (``ji``: static argument numbers and names), the argument paths (``dbg.arg_names``),
the abstract values (``avals``: shape, dtype, weak type, abstract sharding) and the call's arguments (static
values, which were passed by keyword, their placement); with JAX's trace context (global settings) and mesh,
the signature built from them is compared with every signature of the function traced (and so compiled)
before in this process — at most :data:`SIGNATURES_KEPT` per function — by the same function object (JAX keys
its cache per object; another object's only when this one has none), and the closest one (fewest differing
attributes, counted over all arguments by :func:`xlakit._jax.retrace_changes.distance`; on a tie a static value
changed in type only, ``2`` -> ``2.0``, then the latest) explains the retrace, naming every attribute that
differs from it. Not the previous call's: a static value
already compiled (``n: 7 -> 3`` with 3 compiled before) is no cause, the argument that forced the new program
is. A change whose new value was compiled before, in another combination, says so (``seen: "yes"``). Checked
on jax 0.10.2; on a JAX whose frame differs, a retrace is still reported, with "the signature could not be
read on this JAX version".

A function is known by where it is defined (qualified name, file, first line), so a function re-created on
every call (``jax.jit(lambda ...)`` in a loop) is recognised as the same one, with the change "function" when
this object has compiled nothing yet.
The first trace of a function is not a recompile.

Who reports: the JAX listeners (:mod:`xlakit._jax.listeners`, installed by ``events.record()`` and
``events.install_listeners()``) while installed; otherwise, while transparent mode is enabled, :func:`watch`'s
own trace-duration listener (registered with ``jax.monitoring`` once, removed by the last ``unwatch``).
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import sys
import threading
import time
import warnings
import weakref
from typing import Any

from xlakit._jax import trace_context
from xlakit._jax.retrace_changes import Signature as _Signature
from xlakit._jax.retrace_changes import closest, describe, diff, static_value
from xlakit._jax.trace_identity import abstract_only, identity, trace_failed

__all__ = ["RecompileWarning", "RetraceTracker", "FIXES", "TRACKER", "watch", "quiet_recompiles"]

#: The usual fix, per kind of change.
FIXES = {
    "shape": "pad or bucket the argument to a few fixed shapes, or mark it static if it is a Python value",
    "dtype": "pass one dtype every time (e.g. jnp.asarray(x, jnp.float32))",
    "weak_type": "pass arrays, not Python scalars, or always the same kind (a Python float is weakly typed)",
    "static": "a static argument's value is part of the cache key: keep its values few, or pass it as an array "
              "instead of in static_argnums/static_argnames",
    "structure": "keep the argument's pytree structure fixed (same keys and lengths, no None switching)",
    "sharding": "place the argument with the same sharding every call (jax.device_put)",
    "passed": "pass the argument the same way every call: always by keyword or always positionally",
    "config": "do not change this global setting between calls",
    "function": "create the jitted function once (outside the loop), not on every call",
    "option": "create the jitted function once with the options you mean: another jax.jit option (donation, "
              "shardings, static arguments) makes another program",
    "unknown": "look at JAX's explanation with jax.config.update('jax_explain_cache_misses', True)",
}

#: The warning's verb for a kind of change that is no attribute of the argument ("b changed how it was passed").
_CHANGED = {"passed": "changed how it was passed", "function": "is a new function object", "config": "changed value",
            "option": "is another jax.jit option"}

#: Signatures kept per function (the latest ones) to find the closest to a retrace, and in all: a function
#: traced at many shapes keeps its latest 16; past 4096 in all, the least recently traced functions are dropped.
SIGNATURES_KEPT = 16
SIGNATURES_TOTAL = 4096


class RecompileWarning(UserWarning):
    """A jitted function recompiled more often than the threshold within the window (issued once per function)."""


def _unwrap(fun: Any) -> Any:
    for _ in range(8):
        inner = getattr(fun, "func", None) or getattr(fun, "__wrapped__", None)
        if inner is None:
            break
        fun = inner
    return fun






def _eager_primitive(fun: Any) -> bool:
    """JAX's wrapper that jits one primitive applied eagerly (``jit_broadcast_in_dim`` from ``jnp.ones``)."""
    code = getattr(_unwrap(fun), "__code__", None)
    return code is not None and code.co_filename.replace("\\", "/").endswith("/jax/_src/dispatch.py")


def _trace_frame() -> Any:
    frame: Any = sys._getframe(1)
    for _ in range(30):
        if frame is None:
            return None
        if frame.f_code.co_name == "_trace_for_jit":
            return frame
        frame = frame.f_back
    return None




def _aval(aval: Any) -> tuple[str, str, bool, str, str]:
    shape = getattr(aval, "shape", None)
    dtype = str(getattr(aval, "dtype", "?"))
    shape_s = "[" + ",".join(str(d) for d in shape) + "]" if shape is not None else ""
    return shape_s, dtype, bool(getattr(aval, "weak_type", False)), "", _placement_key(aval)


def _placement_key(aval: Any) -> str:
    """What JAX's tracing cache compares of a value's placement: the abstract sharding (mesh and spec, not the
    devices: an array committed to another device is compiled again, not traced again), memory space and
    varying axes. The spec has one entry per dimension, so its trailing ``None`` entries are dropped: a new
    rank is a shape change only."""
    sharding = getattr(aval, "sharding", None)
    spec = getattr(sharding, "spec", None)
    dims = list(spec or ())
    while dims and dims[-1] is None:
        dims.pop()
    extra = "".join(f" {a}={v}" for a in ("unreduced", "reduced") if (v := getattr(spec, a, None)))
    mesh = getattr(sharding, "mesh", sharding)
    return (f"mesh {mesh}, spec {tuple(dims)}{extra}, memory {getattr(aval, 'memory_space', None)}, "
            f"varying {getattr(aval, 'vma', None)}")


def _argument_names(ji: Any) -> tuple[Any, Any]:
    """Functions naming a positional argument by index and a keyword argument by key as JAX's argument paths
    do (``a``, ``rest[0]``, ``kw['e']``), from the signature JAX keeps in the jit options."""
    params = list(getattr(getattr(ji, "fun_signature", None), "parameters", {}).values())
    kinds = inspect.Parameter
    positional = [p.name for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    var_pos = next((p.name for p in params if p.kind == kinds.VAR_POSITIONAL), None)
    var_kw = next((p.name for p in params if p.kind == kinds.VAR_KEYWORD), None)
    named = {p.name for p in params if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)}

    def by_index(i: int) -> str:
        if i < len(positional):
            return positional[i]
        return f"{var_pos}[{i - len(positional)}]" if var_pos else f"args[{i}]"

    def by_key(k: str) -> str:
        return f"{var_kw}[{k!r}]" if var_kw and k not in named else k

    return by_index, by_key


def _signature(frame: Any) -> _Signature:
    """What JAX's tracing cache keys a trace on, as comparable text, read from ``_trace_for_jit``'s locals."""
    import jax

    local = frame.f_locals
    fun, ji, dbg, avals = local["fun"], local["ji"], local["dbg"], local["avals"]
    args, kwargs = local.get("args", ()), local.get("kwargs", {})
    names = list(getattr(dbg, "arg_names", None) or ())
    leaves: dict[str, tuple[str, str, bool, str, str]] = {}
    for i, aval in enumerate(avals):
        leaves[names[i] if i < len(names) and names[i] else f"arg{i}"] = _aval(aval)
    count = len(args)  # a negative static_argnums counts from the end of this call's positional arguments
    static_nums = {p % count for p in (getattr(ji, "static_argnums", ()) or ()) if -count <= p < count}
    static_names = tuple(getattr(ji, "static_argnames", ()) or ())
    by_index, by_key = _argument_names(ji)
    static: dict[str, str] = {}
    typed: dict[str, tuple[str, Any]] = {}  # JAX compares a static value with its type: 2 and 2.0 are two programs
    passed: dict[str, str] = {}  # f(a, b=b) and f(a, b) are two entries of JAX's tracing cache
    dynamic: list[tuple[str, Any]] = []  # (argument name, value)
    dynamic_kw: list[tuple[str, Any]] = []
    for i, a in enumerate(args):
        passed[by_index(i)] = "positionally"
        if i in static_nums:
            static[by_index(i)], typed[by_index(i)] = static_value(a)
        else:
            dynamic.append((by_index(i), a))
    for k, v in kwargs.items():
        passed[by_key(k)] = "by keyword"
        if k in static_names:
            static[by_key(k)], typed[by_key(k)] = static_value(v)
        else:
            dynamic_kw.append((k, v))
    # in JAX's order (keywords sorted, as a dict flattens), so the placements line up with the abstract values
    named = [*dynamic, *((by_key(k), v) for k, v in sorted(dynamic_kw, key=lambda kv: kv[0]))]
    in_order = tuple(v for _, v in named)
    placed = jax.tree_util.tree_leaves(in_order)
    if len(placed) == len(leaves):
        for (path, (shape, dtype, weak, _, key)), leaf in zip(list(leaves.items()), placed, strict=True):
            sharding = getattr(leaf, "sharding", None) if getattr(leaf, "_committed", False) else None
            leaves[path] = (shape, dtype, weak, str(sharding) if sharding is not None else "", key)
    structure = str(jax.tree_util.tree_structure(in_order)).removeprefix("PyTreeDef(")[:-1]
    config_values: dict[str, tuple[str, Any]] = {}  # the trace context's values themselves: JAX compares them by ==
    config = trace_context.config(config_values)
    mesh = trace_context.mesh(local.get("ctx_mesh"), config)
    inner = _unwrap(fun)
    # JAX keys its tracing cache on the object jax.jit wraps (a partial, jax.grad's or a decorator's wrapper: a new
    # one each time retraces even when the code underneath is the same), never on what it wraps
    try:
        ref: Any = weakref.ref(fun)
    except TypeError:  # an object without weak references: compare it by identity while it lives
        ref = (lambda obj: lambda: obj)(fun)
    return {"ref": ref, "qualname": getattr(inner, "__qualname__", None), "leaves": leaves, "static": static,
            "static_types": typed, "passed": passed, "structure": structure, "config": config,
            "config_values": config_values, "mesh": mesh,
            "trees": {n: jax.tree_util.tree_structure(v) for n, v in named}, "options": trace_context.options(ji)}


class RetraceTracker:
    """Keeps each function's trace signatures (the latest :data:`SIGNATURES_KEPT`); turns a retrace into a
    ``recompile`` event whose changes are against the closest signature compiled before (:func:`closest`).

    One per process (:data:`TRACKER`), so a function's history outlives one ``events.record()`` block.

    Args:
      warn_after: a :class:`RecompileWarning` is issued (once per function) when a function recompiles more
        than this many times within ``window_s`` seconds; None: never.
    """

    def __init__(self, warn_after: int | None = 5, window_s: float = 60.0) -> None:
        self.warn_after = warn_after
        self.window_s = window_s
        self._lock = threading.Lock()
        self._seen: collections.OrderedDict[tuple, list[_Signature]] = collections.OrderedDict()
        self._kept = 0  # signatures held in _seen, in all
        self._times: dict[tuple, collections.deque[float]] = {}
        self._warned: set[tuple] = set()

    def on_trace(self, emit: Any, name: str | None, fun_name: str | None) -> None:
        """Called at JAX's trace-duration signal, on the tracing thread, with JAX's frames on the stack;
        a retrace is emitted as ``emit("recompile", source="jit", name=..., reason=..., changes=[...])``."""
        if _QUIET.depth:
            return  # xlakit's own loop over shapes (memory.sweep): not the user's recompile, and not their history
        frame = _trace_frame()
        if frame is not None and _eager_primitive(frame.f_locals.get("fun")):
            return  # jnp/lax applied outside jit: each new parameter set is another program, not a recompile
        if frame is not None and _xlakit_function(frame.f_locals.get("fun")):
            return  # xlakit's own shape evaluations (memory.sweep's abstract arguments) are not the user's retraces
        if trace_failed(frame) or abstract_only(frame):
            return  # a trace that raised, or one of eval_shape / make_jaxpr: nothing compiled, no signature kept
        sig: _Signature | None = None
        ident: tuple = (fun_name, None, 0)
        if frame is not None:
            try:
                ident = identity(frame.f_locals.get("fun"), fun_name)
                sig = _signature(frame)
            except Exception:  # noqa: BLE001 - another JAX's frame: report the retrace without the signature
                sig = None
        with self._lock:
            seen = ident in self._seen
            history = list(self._seen.get(ident, ()))
            self._remember(ident, sig)
        if not seen:
            return
        if history and sig is not None:
            changes, latest = closest(history, sig)
            reason = describe(changes, latest)
        else:
            changes = [{"what": "unknown", "path": "arguments", "before": "?", "after": "?"}]
            reason = "retraced; the signature could not be read on this JAX version"
        emit("recompile", source="jit", name=name, reason=reason, changes=changes)
        if not _library_function(frame.f_locals.get("fun") if frame is not None else None):
            self._maybe_warn(ident, name, changes)  # JAX's own helpers (jit__normal) recompile by design

    def _remember(self, ident: tuple, sig: _Signature | None) -> None:
        """Add ``sig`` to the function's signatures (latest :data:`SIGNATURES_KEPT`, retraced ones last); locked."""
        kept = self._seen.setdefault(ident, [])
        self._seen.move_to_end(ident)
        if sig is not None:
            same = next((i for i, k in enumerate(kept) if not diff(k, sig)), None)
            if same is not None:
                kept.pop(same)
                self._kept -= 1
            kept.append(sig)
            self._kept += 1
            if len(kept) > SIGNATURES_KEPT:
                kept.pop(0)
                self._kept -= 1
        while self._kept > SIGNATURES_TOTAL or len(self._seen) > SIGNATURES_TOTAL:
            _, dropped = self._seen.popitem(last=False)
            self._kept -= len(dropped)

    def _maybe_warn(self, ident: tuple, name: str | None, changes: list[dict[str, str]]) -> None:
        now = time.monotonic()
        if self.warn_after is None:
            return
        with self._lock:
            times = self._times.setdefault(ident, collections.deque(maxlen=max(1, self.warn_after + 1)))
            if times.maxlen != self.warn_after + 1:  # the threshold changed since
                times = self._times[ident] = collections.deque(times, maxlen=self.warn_after + 1)
            times.append(now)
            recent = [t for t in times if now - t <= self.window_s]
            if len(recent) <= self.warn_after or ident in self._warned:
                return
            self._warned.add(ident)
        # a value compiled before is no cause on its own: name the change to a new value first
        main = next((c for c in changes if not c.get("seen")), changes[0] if changes else
                    {"what": "unknown", "path": "arguments"})
        from xlakit._text.format import fmt_seconds  # "in 412 ms", not "in 0 s"

        message = (
            f"{name or ident[0]} recompiled {len(recent)} times in {fmt_seconds(now - recent[0])}; the last time "
            f"because {main['path']} {_CHANGED.get(main['what'], 'changed its ' + main['what'].replace('_', ' '))} "
            f"({describe(changes)}). Usual fix: "
            f"{FIXES.get(main['what'], FIXES['unknown'])}. See xlakit.events.recompiles().")
        frame = _user_frame()
        if frame is None:
            warnings.warn(message, RecompileWarning, stacklevel=2)
            return
        from xlakit._sources import display_file

        where = frame.f_code.co_filename
        shown = display_file(where)  # a notebook cell reads "cell [12]", not ipykernel's temporary file name
        warnings.warn_explicit(message, RecompileWarning, shown if shown.startswith("cell [") else where,
                               frame.f_lineno, module=frame.f_globals.get("__name__") or "__main__",  # None: unshown
                               registry=frame.f_globals.setdefault("__warningregistry__", {}))


class _Quiet(threading.local):
    depth = 0


_QUIET = _Quiet()


@contextlib.contextmanager
def quiet_recompiles():
    """Traces on this thread inside the block are not recompiles: no ``recompile`` event, no
    :class:`RecompileWarning`, and a function's last signature stays the user's own (its next real retrace is
    compared with that). For xlakit's own loops over shapes (``memory.sweep``/``max_batch``, ``MemoryExplorer``),
    whose retraces are the point: they would otherwise count against the user's function and make
    ``events.last(fn)`` say "recompiled" for a call the user never made. Their compiles are still events."""
    _QUIET.depth += 1
    try:
        yield
    finally:
        _QUIET.depth -= 1


def _library_function(fun: Any) -> bool:
    """True when the traced function's code lives in a library (jax's ``_normal``, flax, optax): its
    recompiles are the library's business, and the usual fixes (pad, static_argnums) are not the user's."""
    from xlakit._sources import is_library_file

    try:
        code = getattr(inspect.unwrap(fun), "__code__", None)
    except Exception:  # noqa: BLE001 - an odd callable: treat it as the user's
        return False
    return code is not None and is_library_file(code.co_filename)


def _xlakit_function(fun: Any) -> bool:
    """True when the traced function is defined inside xlakit itself."""
    from xlakit._sources import library_package

    try:
        code = getattr(inspect.unwrap(fun), "__code__", None)
    except Exception:  # noqa: BLE001 - an odd callable: not ours
        return False
    return code is not None and library_package(code.co_filename) == "xlakit"


def _user_frame() -> Any:
    """The innermost frame of user code (where the warning points), or None."""
    from xlakit._sources import is_library_file

    frame: Any = sys._getframe(1)
    for _ in range(200):
        if frame is None or not is_library_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


#: The process's tracker, used by the JAX listeners.
TRACKER = RetraceTracker()


_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_watch_lock = threading.Lock()
_watchers: list[Any] = []


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    if event != _TRACE or not _watchers:
        return
    listeners = sys.modules.get("xlakit._jax.listeners")
    if listeners is not None and listeners.installed() is not None:
        return  # the listeners report retraces themselves, into their own log
    try:
        from xlakit._jax.jax_signals import module_name

        fun_name = kwargs.get("fun_name")
        TRACKER.on_trace(_watchers[-1], module_name(fun_name, wrap="jit"), fun_name)
    except Exception:  # noqa: BLE001 - never break a trace for a report about it
        pass


def watch(emit: Any) -> Any:
    """Report retraces to ``emit`` (the newest watcher wins) while no JAX listeners are installed; returns the
    function that stops it. Imports JAX."""
    from jax._src import monitoring

    with _watch_lock:
        if not _watchers:
            monitoring.register_event_duration_secs_listener(_on_duration)  # type: ignore[arg-type]
        _watchers.append(emit)

    def unwatch() -> None:
        with _watch_lock:
            if emit not in _watchers:
                return
            _watchers.remove(emit)
            if _watchers:
                return
            for remover in ("unregister_event_duration_listener", "_unregister_event_duration_listener_by_callback"):
                remove = getattr(monitoring, remover, None)
                if remove is not None:
                    try:
                        remove(_on_duration)
                    except (AssertionError, ValueError, KeyError):  # already removed (clear_event_listeners)
                        pass
                    return

    return unwatch
