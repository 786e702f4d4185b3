"""Make every kernel a loaded executable calls ready before it runs; refuse the ones xlakit cannot make ready.

An executable compiled by XLA calls some kernels through custom calls that XLA looks up by name at run time.
Most are ready once ``import jax`` registered them, but jaxlib fills some only when *lowering* needs them: the
CPU LAPACK kernels (cholesky, inv, eigh, svd, qr, lu, schur, eig, hessenberg, tridiagonal, triangular solve)
are function pointers that ``jaxlib.cpu._lapack.initialize()`` sets, and lowering a linalg op is what calls it
(``jax._src.lax.linalg.initialize_lapack``). A program loaded without lowering — ``ExecutableCache.load``, a
bundle's warm path, a transparent-mode hit — then calls a null pointer on its first run: SIGSEGV
(jax-ml/jax#28908, #29610; JAX's ``jax.export`` path calls ``initialize_lapack`` since PR #33522). The CPU
sparse kernels are registered with XLA only when ``jax.experimental.sparse`` is imported.

:func:`make_ready` asks the platform table (:mod:`xlakit._jax.platforms`) how the platform resolves custom calls.
Where its compiler turns every custom call into code inside the executable (TPU: compiler-internal targets such as
``AssumeGatherIndicesInBound``, ``ConcatBitcast``, ``GatherScatterIndicesBitpacked``, and Pallas/Mosaic's
``tpu_custom_call``; measured: such executables loaded in a fresh process that lowered nothing return the reference
answers), nothing needs to be ready in this process and the HLO is not read at all. Elsewhere it reads the
custom-call targets of the loaded executable's optimized HLO module — from the serialized executable where its
layout is known (XLA:CPU), else from ``hlo_modules()`` — (HloModuleProto field 3 computations,
HloComputationProto field 2 instructions, HloInstructionProto field 2 opcode / field 28 custom_call_target) and,
per target:

* a LAPACK target (named in ``jaxlib.cpu._lapack.registrations()``, or ``lapack_*``): initialise the LAPACK
  kernel table once per process, as JAX's lowering does;
* a CPU sparse target (``jaxlib.cpu_sparse.registrations()``): register it with XLA as
  ``jax.experimental.sparse`` does, if it is not registered yet;
* a Python callback target (``xla_*python_cpu_callback``): ready only where the loading path rebinds this
  process's callbacks (JAX's own cache hook passes them); elsewhere the program is refused;
* XLA's own (names starting ``__`` such as ``__cublas$gemm`` / ``__onednn$matmul``, and ``TopK`` and the
  like, which XLA's compilers implement), or any other target registered with XLA for this platform
  (``xla_client.custom_call_targets``) by a library that registers at import: ready;
* anything else: :class:`KernelsNotReady` — XLA would look the name up in this process's registry and not find
  it; callers compile the program instead (the same check XLA makes, made before XLA can fail on it).

Cost: on XLA:CPU a program without custom calls costs a walk of three protobuf headers and one substring test of
its HLO bytes (~0.05 ms for a 200-layer program); the LAPACK table is filled once per process (it imports SciPy's
LAPACK bindings, as lowering would).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable

from xlakit._jax import platforms
from xlakit._jax.assignment import _proto_fields, _varint

__all__ = ["KernelsNotReady", "make_ready", "prepare", "custom_call_targets", "serialized_targets", "recorded_targets",
           "unready_reason", "host_code", "MAX_TARGETS"]

# Custom calls that XLA's compilers expand or implement themselves (no registered kernel is looked up).
_XLA_BUILTIN = frozenset({
    "TopK", "SliceToDynamic", "PadToStatic", "AllocateBuffer", "Sharding", "SPMDFullToShardShape",
    "SPMDShardToFullShape", "MoveToHost", "MoveToDevice", "annotate_device_placement", "LayoutConstraint",
    "X64Combine", "X64SplitLow", "X64SplitHigh", "InspectSharding", "ApproxTopK", "PartialReduce",
    "dce_sink",
})
_CALLBACK_TARGETS = frozenset({"xla_python_cpu_callback", "xla_ffi_python_cpu_callback",
                               "xla_buffer_python_cpu_callback", "xla_ffi_partitioned_python_cpu_callback",
                               "xla_python_gpu_callback", "xla_ffi_python_gpu_callback"})

_lock = threading.Lock()
_ready: set[tuple[str, str]] = set()  # (platform, target) made ready in this process


class KernelsNotReady(RuntimeError):
    """A loaded executable calls a kernel xlakit cannot make ready without lowering the program here.

    ``targets`` are the custom-call target names; ``reason`` says why. Raised before the executable runs;
    callers compile the program instead (transparent mode, bundles) or tell the user to (``ExecutableCache.load``).
    """

    def __init__(self, targets: Iterable[str], reason: str):
        self.targets = tuple(sorted(targets))
        self.reason = reason
        super().__init__(f"the program calls kernel(s) {_named(self.targets)} that are not ready in this process "
                         f"without lowering: {reason}")


#: Most custom-call targets :func:`unready_reason` judges: an executable calls a few dozen distinct kernels (the largest
#: recorded here: 4 on the TPU, 12 on CPU); a header that lists more is refused unread (its load would read the real
#: executable anyway), so that a million names cost no more than ten.
MAX_TARGETS = 10_000
#: Names a message lists; past this many, a count ("and 999,995 more"). Entry headers carry ``custom_calls`` and a
#: header signed by any holder of the secret may list a million: each was put in a reason, an event and a warning.
_NAMED = 5


def _named(names: Iterable[str]) -> str:
    """``['a', 'b', ...]`` of at most :data:`_NAMED` names (each cut to 80 characters), then how many more."""
    names = list(names)
    shown = [n if len(n) <= 80 else n[:77] + "..." for n in names[:_NAMED]]
    more = len(names) - len(shown)
    return f"{shown}" + (f" and {more:,} more" if more else "")


def custom_call_targets(executable) -> frozenset[str]:
    """The custom-call target names in the optimized HLO modules of a loaded XLA executable.

    ``executable`` is a ``jaxlib`` ``LoadedExecutable`` (``hlo_modules()``; serializing a module's proto costs
    ~5-35 ms for a 200-layer program, so :func:`make_ready` reads the serialized executable instead where it
    knows the format). Raises :class:`KernelsNotReady` when the HLO cannot be read (the targets are unknown).
    """
    try:
        protos = [m.as_serialized_hlo_module_proto() for m in executable.hlo_modules()]
    except Exception as e:  # noqa: BLE001 - a backend without HLO access: its kernels are unknown
        raise KernelsNotReady((), f"the executable's HLO could not be read ({type(e).__name__}: {e})") from e
    targets: set[str] = set()
    for proto in protos:
        targets |= _module_targets(proto)
    return frozenset(targets)


def serialized_targets(serialized: bytes) -> frozenset[str] | None:
    """The custom-call targets of a serialized XLA:CPU executable, read from its bytes without XLA; None where
    the bytes are not in the known layout: an optional IFRT header (a varint length, then that many bytes), an
    ``ExecutableAndOptionsProto`` whose field 1 holds the CPU executable, whose field 1 holds an ``HloProto``
    whose field 1 is the optimized ``HloModuleProto`` (jaxlib 0.10). Walks field headers in place (no copies):
    a program without custom calls costs a few header reads and one substring search."""
    starts = []
    try:
        header_len, pos = _varint(serialized, 0)
        starts.append(pos + header_len)
    except IndexError:
        pass
    starts.append(0)
    for begin in starts:
        span: tuple[int, int] | None = (begin, len(serialized))
        for _ in range(3):  # executable-and-options -> CPU executable -> HloProto -> HloModuleProto
            span = _first_field(serialized, *span, 1) if span is not None else None
        if span is None or _leading_fields(serialized, *span) != [1, 2, 3]:
            continue  # an HloModuleProto starts with its name (1), entry computation name (2), computations (3)
        if serialized.find(b"custom-call", *span) < 0:  # the opcode's name: no custom calls in this module
            return frozenset()
        return frozenset(_module_targets(bytes(serialized[span[0]:span[1]])))
    return None


def _fields(buf: bytes, pos: int, end: int):
    """``(number, wire type, value start, value end)`` of each field in ``buf[pos:end]``; stops at bad bytes."""
    try:
        while pos < end:
            key, pos = _varint(buf, pos)
            num, wire = key >> 3, key & 7
            if wire == 0:
                _, after = _varint(buf, pos)
                yield num, wire, pos, after
                pos = after
            elif wire == 2:
                n, pos = _varint(buf, pos)
                if num == 0 or pos + n > end:
                    return
                yield num, wire, pos, pos + n
                pos += n
            elif wire in (1, 5):
                n = 8 if wire == 1 else 4
                yield num, wire, pos, pos + n
                pos += n
            else:
                return
    except IndexError:
        return


def _first_field(buf: bytes, pos: int, end: int, number: int) -> tuple[int, int] | None:
    for num, wire, vstart, vend in _fields(buf, pos, end):
        if num == number and wire == 2:
            return vstart, vend
    return None


def _leading_fields(buf: bytes, pos: int, end: int) -> list[int]:
    out: list[int] = []
    for num, wire, _, _ in _fields(buf, pos, end):
        if wire != 2 or len(out) == 3:
            break
        out.append(num)
    return out


def _module_targets(proto: bytes) -> set[str]:
    targets: set[str] = set()
    if b"custom-call" not in proto:  # the opcode's name: a module without custom calls lacks it
        return targets
    for num, wire, computation in _proto_fields(proto) or []:
        if num != 3 or wire != 2 or b"custom-call" not in computation:
            continue
        for n2, w2, instruction in _proto_fields(computation) or []:
            if n2 != 2 or w2 != 2 or b"custom-call" not in instruction:
                continue
            fields = {n3: v for n3, w3, v in _proto_fields(instruction) or [] if w3 == 2 and n3 in (2, 28)}
            if fields.get(2) == b"custom-call" and 28 in fields:
                targets.add(bytes(fields[28]).decode("utf-8", "replace"))
    return targets


def make_ready(executable, platform: str, *, serialized: bytes | None = None, callbacks: bool = False
               ) -> frozenset[str]:
    """Make ready every kernel ``executable`` (a loaded XLA executable for ``platform``) calls; see the module
    docstring. ``serialized``: the bytes it was loaded from (read instead of asking XLA for the HLO, where the
    layout is known). ``callbacks``: the loading path rebound this process's Python callbacks. Returns the
    targets checked (empty where the platform compiles every custom call into the executable).

    Raises:
      KernelsNotReady: a target xlakit cannot make ready; the executable must not run (compile instead).
    """
    if platforms.rules(platform).custom_calls_compiled_in:
        return frozenset()  # nothing to make ready, and reading the HLO would cost ~80 ms per 68 MB program
    targets = serialized_targets(serialized) if serialized is not None else None
    if targets is None:
        targets = custom_call_targets(executable)
    prepare(targets, platform, callbacks=callbacks)
    return targets


def prepare(targets: Iterable[str], platform: str, *, callbacks: bool = False) -> None:
    """Make the named custom-call targets of ``platform`` ready, or raise :class:`KernelsNotReady`."""
    platform = platform.lower()
    compiled_in = platforms.rules(platform).custom_calls_compiled_in
    todo = [t for t in targets if (platform, t) not in _ready]
    if not todo:
        return
    with _lock:
        unknown, refused = [], []
        registered: frozenset[str] | None = None
        for target in todo:
            if target in _CALLBACK_TARGETS:
                if not callbacks:
                    refused.append(target)
                continue  # readiness depends on the path: never remembered
            if compiled_in or target.startswith("__") or target in _XLA_BUILTIN:
                pass
            elif platform == "cpu" and _is_lapack(target):
                _initialize_lapack()
            elif platform == "cpu" and target in _cpu_sparse_targets():
                _register_cpu_sparse()
            else:
                if registered is None:
                    registered = _registered(platform)
                if target not in registered:
                    unknown.append(target)
                    continue
            _ready.add((platform, target))
    if refused:
        raise KernelsNotReady(refused, "the program calls back into Python, and a loaded executable carries no "
                                       "Python callbacks")
    if unknown:
        raise KernelsNotReady(unknown, f"no kernel of that name is registered for {platform!r}, and xlakit does "
                                       "not know which library provides it; the program is compiled instead")


def recorded_targets(executable, serialized: bytes | None = None) -> tuple[str, ...] | None:
    """The sorted custom-call targets of an executable, for an entry's header (``custom_calls``), or None when
    its HLO cannot be read. From ``serialized`` (XLA:CPU's layout) when given, else ``hlo_modules()`` (measured on
    a TPU v5e: ~80 ms for a 68 MB transformer train step, 0.6 % of its 13.5 s compile)."""
    targets = serialized_targets(serialized) if serialized is not None else None
    if targets is None:
        try:
            targets = custom_call_targets(executable)
        except KernelsNotReady:
            return None
    return tuple(sorted(targets))


def host_code(targets, platform: str) -> bool:
    """Whether an executable with these custom-call targets embeds machine code for the host CPU on ``platform``
    (TPU ``HostExecute``: ``compute_on("device_host")``; :attr:`~xlakit._jax.platforms.Platform.host_code_targets`).
    """
    return bool(platforms.rules(platform).host_code_targets.intersection(targets or ()))


def unready_reason(targets, platform: str, *, callbacks: bool = False) -> str | None:
    """Why a loaded executable with these custom-call targets could not run in this process without lowering,
    or None when :func:`prepare` would make it ready — a prediction that changes nothing (``explain`` uses it to
    say what a load will do). ``targets`` None (not recorded): None, the load itself will check."""
    if targets is None:
        return None
    targets = targets if isinstance(targets, (list, tuple)) else list(targets)
    if len(targets) > MAX_TARGETS:  # a million names took 8.9 s per lookup, each looked up in jaxlib's tables
        return (f"the entry lists {len(targets):,} custom-call targets, more than the {MAX_TARGETS:,} an executable "
                "could call")
    platform = platform.lower()
    rule = platforms.rules(platform)
    named = set(targets)
    refused = named & _CALLBACK_TARGETS if not callbacks else set()
    if refused:
        return (f"the program calls back into Python ({', '.join(sorted(refused))}), and a loaded executable "
                "carries no Python callbacks")
    if rule.custom_calls_compiled_in:
        return None
    rest = {t for t in named - _CALLBACK_TARGETS - _XLA_BUILTIN if not t.startswith("__")}
    if platform == "cpu" and rest:  # made ready at load, as lowering would
        rest = {t for t in rest - _lapack_targets() - _cpu_sparse_targets() if not t.startswith("lapack_")}
    unknown = sorted(rest - _registered(platform)) if rest else []
    if unknown:
        return (f"kernel(s) {_named(unknown)} are not registered for {platform!r} in this process (XLA looks them "
                "up here)")
    return None


def _is_lapack(target: str) -> bool:
    return target.startswith("lapack_") or target in _lapack_targets()


@functools.lru_cache(maxsize=1)
def _lapack_targets() -> frozenset[str]:
    """The LAPACK kernel names jaxlib registers (``jaxlib.cpu._lapack.registrations()``: fixed for the process)."""
    from jaxlib.cpu import _lapack

    return frozenset(_lapack.registrations())


_lapack_initialized = False


def _initialize_lapack() -> None:
    # What JAX's linalg lowering and jax.export's call path do (jax._src.lax.linalg.initialize_lapack).
    global _lapack_initialized
    if _lapack_initialized:
        return
    try:
        from jax._src.lax.linalg import initialize_lapack
    except ImportError:  # older JAX: the jaxlib module itself
        from jaxlib.cpu import _lapack

        initialize_lapack = _lapack.initialize
    initialize_lapack()
    _lapack_initialized = True


@functools.lru_cache(maxsize=1)
def _cpu_sparse_targets() -> frozenset[str]:
    try:
        from jax._src.lib import cpu_sparse
    except ImportError:
        return frozenset()
    return frozenset(name for targets in cpu_sparse.registrations().values() for name, _, _ in targets)


def _register_cpu_sparse() -> None:
    # As jax.experimental.sparse._lowerings does on import, without importing jax.experimental.sparse.
    from jax._src import ffi
    from jax._src.lib import cpu_sparse

    registered = _registered("cpu")
    for platform, targets in cpu_sparse.registrations().items():
        for name, value, api_version in targets:
            if name not in registered:
                ffi.register_ffi_target(name, value, platform=platform, api_version=api_version)


def _registered(platform: str) -> frozenset[str]:
    from jax._src.lib import xla_client

    names = {platform, platform.upper(), {"gpu": "CUDA"}.get(platform, platform), "Host" if platform == "cpu" else ""}
    found: set[str] = set()
    for name in filter(None, names):
        try:
            found.update(xla_client.custom_call_targets(name))
        except Exception:  # noqa: BLE001 - an unknown platform name
            continue
    return frozenset(found)
