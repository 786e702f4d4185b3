"""Compiled JAX programs to bytes and back: safely, and onto other devices of the same kind.

Built on ``jax.experimental.serialize_executable``. Its payload is a pickle of
``(unloaded_executable, args_info_flat, no_kwargs)`` whose persistent ids stand for the XLA executable
(``('exec', bytes)``), devices (``('device', id)``) and the client (``('client',)``). Three things in it are
unsafe for a cache, and this module fixes each:

* **Loading runs code.** JAX unpickles with a plain ``pickle.Unpickler``; any payload can run anything.
  :func:`load_compiled` scans the payload first, admitting only the globals JAX's format contains, by name, and
  calling only those the format calls (``FORMAT_GLOBALS`` in :mod:`xlakit._jax.unpickle_policy`), then
  unpickles with :class:`_RestrictedUnpickler`, which resolves the same names. :func:`serialize_compiled` checks
  every payload against the same policy, so what it writes is always loadable. The executable is written after
  the pickle, not inside it (:mod:`xlakit._jax.payload_layout`): the scan and the unpickler read kilobytes, and
  the executable's bytes are copied once, for XLA, however large the program.
* **Other device orders fail late.** JAX maps device ids to the *same* ids, and
  ``Client.deserialize_executable`` keeps the device assignment compiled into the executable. A permuted
  device list therefore loads, then fails at the first call with a sharding mismatch whose two shardings
  print identically (and a naive remap of the Python shardings alone makes the call fail in XLA, or crash).
  Here device ``placement.device_ids[i]`` becomes ``devices[i]`` everywhere: in the shardings and meshes
  inside the pickle, and in the executable's device assignment, which is rewritten in the compile options
  passed to ``deserialize_executable``.
* **Wrong device counts kill the process.** Loading onto fewer devices fails a C++ CHECK (SIGABRT).
  :func:`check_devices` validates count, platform, kinds and addressability before any XLA call, and the
  payload's own device ids are cross-checked against the :class:`Placement` before the executable loads.

The HMAC on a store entry is what makes a payload trustworthy; the restricted unpickler is defence in depth
(the executable inside is native code, and running it is running code).

Importing this module is cheap: JAX is imported inside the functions that need it.
"""

from __future__ import annotations

import functools
import inspect
import io
import pickle
from collections.abc import Sequence
from typing import Any, NoReturn

from xlakit._jax import payload_layout
from xlakit._jax.kernels import KernelsNotReady, make_ready
from xlakit._jax.unpickle_policy import _resolve_global, _scan_payload
from xlakit._record import Record

__all__ = [
    "NotSerializable",
    "DevicePlacementError",
    "Placement",
    "placement_of",
    "serialize_compiled",
    "check_devices",
    "load_compiled",
]


class NotSerializable(Exception):
    """JAX cannot turn this compiled program into bytes; ``reason`` says why (callers fall back to compiling)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class DevicePlacementError(ValueError):
    """The requested devices cannot run the executable; raised before any XLA call."""


class _PlacementFields(Record):
    platform: str
    device_ids: tuple[int, ...]
    device_kinds: tuple[str, ...]
    process_indices: tuple[int, ...]


class Placement(_PlacementFields):
    """Where a compiled program runs: its devices in device-assignment order (logical device ``i`` first
    ran on ``device_ids[i]``). JSON-ready through :meth:`to_dict` / :meth:`from_dict`. Raises ValueError
    for an empty platform or device list, lengths that differ, or ids/kinds of the wrong type."""

    __slots__ = ()

    def __new__(cls, platform: str, device_ids: Sequence[int], device_kinds: Sequence[str],
                process_indices: Sequence[int]) -> Placement:
        # Accept lists (e.g. from JSON) but store tuples, so placements compare and hash by value.
        self = super().__new__(cls, platform, tuple(device_ids), tuple(device_kinds), tuple(process_indices))
        self._check()
        return self

    def _check(self) -> None:
        if not isinstance(self.platform, str) or not self.platform:
            raise ValueError(f"Placement.platform must be a non-empty string, got {self.platform!r}")
        if not self.device_ids:
            raise ValueError("Placement needs at least one device")
        if not (len(self.device_ids) == len(self.device_kinds) == len(self.process_indices)):
            raise ValueError("Placement.device_ids, device_kinds and process_indices must have the same length")
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in self.device_ids + self.process_indices):
            raise ValueError("Placement.device_ids and process_indices must be integers")
        if not all(isinstance(k, str) for k in self.device_kinds):
            raise ValueError("Placement.device_kinds must be strings")

    def to_dict(self) -> dict:
        return {"platform": self.platform, "device_ids": list(self.device_ids),
                "device_kinds": list(self.device_kinds), "process_indices": list(self.process_indices)}

    @classmethod
    def from_dict(cls, d: dict) -> Placement:
        """Inverse of :meth:`to_dict`. Raises ``ValueError`` on a missing or malformed field."""
        try:
            return cls(platform=d["platform"], device_ids=d["device_ids"], device_kinds=d["device_kinds"],
                       process_indices=d["process_indices"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a Placement dict: {e!r}") from None

    @classmethod
    def of_devices(cls, devices: Sequence[Any]) -> Placement:
        devices = list(devices)
        return cls(platform=devices[0].platform, device_ids=tuple(d.id for d in devices),
                   device_kinds=tuple(d.device_kind for d in devices),
                   process_indices=tuple(d.process_index for d in devices))

    def describe(self) -> str:
        return (f"platform={self.platform} ids={list(self.device_ids)} kinds={list(self.device_kinds)} "
                f"process_indices={list(self.process_indices)}")


def placement_of(compiled) -> Placement:
    """The devices ``compiled`` runs on, in device-assignment order.

    Data: ``compiled._executable._unloaded_executable.device_list`` — the ``DeviceList`` JAX passed to XLA
    as the device assignment (it is ordered; ``device_list[i]`` runs logical device ``i``). Executables
    without it fall back to ``compiled._executable.xla_extension_executable().local_devices()``, which
    XLA returns in the same order but lists only this process's devices.
    """
    executable = compiled._executable
    unloaded = getattr(executable, "_unloaded_executable", None)
    devices = getattr(unloaded, "device_list", None)
    if devices is None:
        devices = executable.xla_extension_executable().local_devices()
    return Placement.of_devices(devices)


# --------------------------------------------------------------------------------------------- serialize

def serialize_compiled(compiled) -> tuple[bytes, Placement]:
    """Pickle ``compiled`` (a ``jax.stages.Compiled``) into bytes that :func:`load_compiled` accepts.

    The payload is ``(unloaded_executable, args_info_flat, no_kwargs, in_tree, out_tree)`` pickled with
    JAX's ``_JaxPjrtPickler`` (as ``jax.experimental.serialize_executable.serialize`` does, plus the two
    treedefs so the caller needs nothing else), the executable's bytes written after the pickle
    (:mod:`xlakit._jax.payload_layout`), then checked against the restricted unpickler's policy.

    Raises:
      NotSerializable: with ``reason`` — programs with host callbacks (``jax.debug.print``, ``pure_callback``:
        "Can't pickle local object ..."), closed-over mutable refs, hoisted ``const_args``, executables
        without an unloaded form ("Compilation does not support serialization"), pytrees whose node classes
        cannot be pickled or would not be accepted when loading. Never a raw pickling error.
    """
    import jax

    unloaded = getattr(getattr(compiled, "_executable", None), "_unloaded_executable", None)
    if unloaded is None:
        raise NotSerializable("Compilation does not support serialization")
    mut = getattr(unloaded, "mut", None)
    if mut is not None and getattr(mut, "in_mut", None):
        raise NotSerializable("can't serialize with a closed-over mutable array ref")
    const_args = getattr(getattr(compiled, "_params", None), "const_args", None)
    if const_args:
        # JAX cannot store hoisted constants (jax_use_simplified_jaxpr_constants) with an executable.
        raise NotSerializable(f"program has {len(const_args)} hoisted const_args, which JAX cannot serialize")

    try:
        args_info_flat, in_tree = jax.tree_util.tree_flatten(compiled.args_info)
        payload = payload_layout.dump((unloaded, args_info_flat, compiled._no_kwargs, in_tree, compiled.out_tree))
    except payload_layout.NotOneExecutable as e:
        raise NotSerializable(str(e)) from None
    except Exception as e:  # pickling raises AttributeError, TypeError, PicklingError, ... depending on the object
        reason = f"{type(e).__name__}: {e}"
        callbacks = getattr(unloaded, "host_callbacks", None)
        if callbacks:
            reason = f"program has {len(callbacks)} host callback(s) (jax.debug.print / callbacks): {reason}"
        raise NotSerializable(reason) from e
    try:
        scan = _scan_payload(payload)
    except pickle.UnpicklingError as e:
        raise NotSerializable(f"the payload would be refused when loading: {e}") from e
    if scan.exec_count != 1:
        raise NotSerializable(f"expected one XLA executable in the payload, found {scan.exec_count}")
    return payload, placement_of(compiled)


# --------------------------------------------------------------------------------------------- devices

def check_devices(placement: Placement, devices=None, backend=None) -> list:
    """Validate that ``devices`` can run an executable compiled for ``placement``; touches no XLA executable.

    ``devices`` are ``jax.Device`` objects or integer ids (looked up in ``backend``); ``None`` means the
    devices with ``placement``'s ids. ``backend`` is a client, a platform name or ``None`` (the client of the
    given devices, else ``jax.devices(placement.platform)``). Device ``i`` will run logical device ``i``,
    i.e. what ran on ``placement.device_ids[i]``.

    Checks: same count; same platform; same device kind position by position; every device exists in the
    backend, belongs to it and is addressable by this process; no duplicates.

    Returns the device objects in order. Raises :class:`DevicePlacementError` naming both device lists,
    what differs and what to do.
    """
    import jax

    problems: list[str] = []
    if devices is not None:
        devices = list(getattr(devices, "flat", devices))  # a list, tuple or ndarray (e.g. Mesh.devices)
    client = _client_for(placement, devices, backend)
    known = {d.id: d for d in client.devices()}
    if devices is None:
        missing = [i for i in placement.device_ids if i not in known]
        if missing:
            _refuse(placement, None, [f"devices {missing} do not exist on this {client.platform} backend "
                                      f"(it has ids {sorted(known)})"],
                    "pass devices= explicitly (same count and kind) to run the program elsewhere")
        devices = [known[i] for i in placement.device_ids]
    else:
        resolved = []
        for d in devices:
            if isinstance(d, int) and not isinstance(d, bool):
                if d not in known:
                    _refuse(placement, None, [f"device id {d} does not exist on this {client.platform} backend "
                                              f"(it has ids {sorted(known)})"], "pass ids of existing devices")
                d = known[d]
            elif not isinstance(d, jax.Device):
                raise TypeError(f"devices must be jax.Device objects or integer ids, got {type(d).__name__}")
            resolved.append(d)
        devices = resolved

    if not devices:
        _refuse(placement, devices, ["no devices given"], f"pass {len(placement.device_ids)} device(s)")
    n, m = len(placement.device_ids), len(devices)
    if n != m:
        problems.append(f"the executable was compiled for {n} device(s), {m} given "
                        "(loading it anyway aborts the process)")
    platforms = sorted({d.platform for d in devices})
    if platforms != [placement.platform]:
        problems.append(f"platform differs: compiled for {placement.platform!r}, given {platforms}")
    for i, (want, d) in enumerate(zip(placement.device_kinds, devices, strict=False)):
        if d.device_kind != want:
            problems.append(f"device kind differs at position {i}: compiled for {want!r}, given {d.device_kind!r} "
                            f"(device {d.id})")
    ids = [d.id for d in devices]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    if dups:
        problems.append(f"duplicate devices {dups}")
    for dev in devices:
        if dev.client != client or known.get(dev.id) is not dev:
            problems.append(f"device {dev.id} ({dev.platform}) does not belong to the backend "
                            f"{client.platform!r} used for loading")
        elif dev.process_index != client.process_index():  # type: ignore[union-attr]
            problems.append(f"device {dev.id} belongs to process {dev.process_index}, not to this process "  # type: ignore[union-attr]
                            f"({client.process_index()}); xlakit loads only onto addressable devices")
    if problems:
        kinds = sorted(set(placement.device_kinds))
        _refuse(placement, devices, problems,
                f"pass exactly {n} {placement.platform} device(s) of kind {kinds[0] if len(kinds) == 1 else kinds} "
                "in the order the program's shards should run, or recompile for these devices")
    return devices


def _client_for(placement: Placement, devices, backend) -> Any:
    import jax

    if backend is not None and not isinstance(backend, str):
        return backend
    if backend is None and devices and isinstance(devices[0], jax.Device):
        return devices[0].client
    platform = backend or placement.platform
    try:
        return jax.devices(platform)[0].client
    except RuntimeError as e:  # jax raises RuntimeError for a platform this process has no backend for
        _refuse(placement, devices, [f"no {platform!r} backend in this process ({e})"],
                "load it on a machine with that platform, or recompile for the devices here")


def _refuse(placement: Placement, devices, problems: list[str], advice: str) -> NoReturn:
    given = "(none resolved)"
    if devices:
        given = (f"platform={'/'.join(sorted({d.platform for d in devices}))} ids={[d.id for d in devices]} "
                 f"kinds={[d.device_kind for d in devices]} "
                 f"process_indices={[d.process_index for d in devices]}")
    raise DevicePlacementError(
        "cannot load the executable onto these devices: " + "; ".join(problems) + ".\n"
        f"  compiled for: {placement.describe()}\n"
        f"  requested:    {given}\n"
        f"  What to do: {advice}.")


# --------------------------------------------------------------------------------------------- load

def load_compiled(payload: Any, placement: Placement, devices=None, backend=None):
    """Rebuild a ``jax.stages.Compiled`` from :func:`serialize_compiled`'s output, on ``devices``.

    ``devices`` (see :func:`check_devices`; ``None`` = the devices with the placement's ids) may be any
    devices of the same count and kinds, in any order: device ``i`` runs what ``placement.device_ids[i]`` ran.
    Steps, each before the next touches more: check the devices; scan the payload's pickle frame with the
    unpickling policy without building anything (and check its device ids match ``placement``); rewrite the
    executable's device assignment when the devices differ; unpickle with :class:`_RestrictedUnpickler`;
    build ``jax.stages.Compiled`` as ``jax.experimental.serialize_executable.deserialize_and_load`` does.
    ``payload`` may be any bytes-like object or a :class:`~xlakit.store.split.SplitPayload`; of the layout
    :func:`serialize_compiled` writes, only the frame is read by the pickle machinery and the executable goes to XLA
    as the split payload's tail itself, else copied once into the ``bytes`` XLA takes (payloads in JAX's own format,
    from entries written before that layout, load too).

    Raises:
      DevicePlacementError: the devices cannot run it, or the payload disagrees with ``placement``.
      pickle.UnpicklingError: the payload names a global outside the allow-list (which is never called)
        or is not a valid payload.
      xlakit._jax.kernels.KernelsNotReady: the executable calls a kernel that cannot be made ready in this
        process without lowering (it is never run; compile the program instead).
      Errors from XLA's ``deserialize_executable`` (e.g. ``jax.errors.JaxRuntimeError``) pass through.
    """
    devices = check_devices(placement, devices, backend)
    client = devices[0].client
    scan = _scan_payload(payload)
    if scan.exec_count != 1:
        raise pickle.UnpicklingError(f"expected one XLA executable in the payload, found {scan.exec_count}")
    if scan.device_ids != set(placement.device_ids):
        # The payload's DeviceList is the executable's device assignment: a placement that disagrees with it
        # would send XLA a wrong device count (which aborts the process).
        _refuse(placement, devices, [f"the payload was compiled for devices {sorted(scan.device_ids)}, "
                                     f"not for the placement's {sorted(placement.device_ids)}"],
                "store the placement that serialize_compiled returned together with its payload")

    id_map = dict(zip(placement.device_ids, devices, strict=False))
    executable = scan.executable()  # XLA takes only bytes: a SplitPayload's tail as it is, else the one copy
    options = None
    if [d.id for d in devices] != list(placement.device_ids):
        options = _retargeted_options(executable, placement, devices)

    unpickler = _RestrictedUnpickler(io.BytesIO(scan.frame), client, id_map, devices, options,
                                     executable if scan.tail is not None else None)
    try:
        unloaded, args_info_flat, no_kwargs, in_tree, out_tree = unpickler.load()
        args_info = in_tree.unflatten(args_info_flat)
    except (pickle.UnpicklingError, DevicePlacementError, KernelsNotReady):
        raise
    except Exception as e:
        if e is unpickler.xla_error:  # XLA's own error: pass it through unchanged
            raise
        raise pickle.UnpicklingError(f"not a valid xlakit executable payload: {type(e).__name__}: {e}") from e
    return _make_compiled(unloaded.load(), args_info, out_tree, no_kwargs)


def _load_executable(client, exec_bytes: bytes, devices: list, options):
    """The one place this module asks XLA to load an executable (tests patch it to prove checks come first)."""
    from jax._src.lib import xla_client as xc

    return client.deserialize_executable(exec_bytes, xc.DeviceList(tuple(devices)), options)


def _make_compiled(loaded, args_info, out_tree, no_kwargs):
    """``jax.stages.Compiled(...)`` as ``deserialize_and_load`` builds it. Up to at least 0.12 the signature
    is ``(executable, const_args, args_info, out_tree, no_kwargs=...)``; older JAX had no ``const_args``."""
    import jax

    if _compiled_takes_const_args(jax.stages.Compiled.__init__):
        return jax.stages.Compiled(loaded, [], args_info, out_tree, no_kwargs=no_kwargs)
    return jax.stages.Compiled(loaded, args_info, out_tree, no_kwargs=no_kwargs)


@functools.lru_cache(maxsize=4)
def _compiled_takes_const_args(init) -> bool:
    """Whether ``Compiled.__init__`` has ``const_args``; asked once per JAX (``inspect.signature`` costs
    ~40 µs, and every loaded program needs the answer). Keyed by the function itself, so a patched or
    reloaded ``jax.stages`` is asked again."""
    return "const_args" in inspect.signature(init).parameters


# --------------------------------------------------------------------------------------------- device assignment
# deserialize_executable keeps the device assignment stored in the executable's compile options, whatever
# executable_devices says. To run on other devices, the stored options are read back from the serialized
# executable, their assignment is mapped old id -> new id, and they are passed as compile_options — the same
# argument JAX's own persistent cache passes (jax._src.compilation_cache) to place a cached executable.
# Serialized layout (PjRt CPU, jaxlib 0.10-0.12): an optional IFRT header (a varint length, then that many
# bytes), then an ExecutableAndOptionsProto {1: executable bytes, 2: CompileOptionsProto}. Where no stored
# assignment matching the placement is found (another backend's format), moving is refused, never guessed.

def _retargeted_options(exec_bytes: bytes, placement: Placement, devices: list):
    import numpy as np
    from jax._src.lib import xla_client as xc

    from xlakit._jax.assignment import _assignment_grid
    from xlakit._jax.keys import stored_compile_options

    for options in stored_compile_options(exec_bytes):  # read without copying the executable
        grid = _assignment_grid(options)
        if grid is not None and sorted(int(i) for i in grid.ravel()) == sorted(placement.device_ids):
            break
    else:
        _refuse(placement, devices, ["this executable's format does not expose a device assignment matching the "
                                     "placement, so it can only be loaded onto the devices it was compiled for"],
                "load it onto the devices with the ids it was compiled for, or recompile")
    new_ids = {old: d.id for old, d in zip(placement.device_ids, devices, strict=False)}
    new_grid = np.vectorize(lambda i: new_ids[int(i)])(grid)
    # executable_build_options is a read-only property returning a reference into the options.
    options.executable_build_options.device_assignment = xc.DeviceAssignment.create(new_grid)
    if not np.array_equal(_assignment_grid(options), new_grid):  # should a binding return a copy: fail, don't guess
        _refuse(placement, devices, ["could not rewrite the executable's device assignment"], "recompile")
    return options




class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles a payload with the global policy of :func:`_resolve_global` and places it on new devices.

    Persistent ids: ``('device', old_id)`` -> the new device at the position of ``old_id`` in the
    placement; ``('client',)`` -> the backend; ``('exec', bytes)`` (JAX's own format) or ``('exec', length)``
    (the frame of :mod:`xlakit._jax.payload_layout`, whose ``executable`` is given) -> ``deserialize_executable``
    on the new devices in order, with the retargeted compile options when the devices changed.
    """

    def __init__(self, file, client, id_map: dict, devices: list, options, executable: bytes | None = None):
        super().__init__(file)
        self._client = client
        self._id_map = id_map
        self._devices = devices
        self._options = options
        self._executable = executable
        self.xla_error: BaseException | None = None

    def find_class(self, module, name):
        return _resolve_global(module, name)

    def persistent_load(self, pid):
        kind = pid[0] if isinstance(pid, tuple) and pid else None
        if kind == "device":
            try:
                return self._id_map[pid[1]]
            except (KeyError, IndexError, TypeError):
                raise pickle.UnpicklingError(f"payload refers to device {pid!r:.80} outside the placement") from None
        if kind == "client":
            return self._client
        if kind == "exec":
            if self._executable is None:  # JAX's own format: the executable inside the pickle
                named = len(pid) == 2 and isinstance(pid[1], bytes)
            else:  # the split layout: the frame names the length of the executable that follows it
                named = len(pid) == 2 and type(pid[1]) is int and pid[1] == len(self._executable)
            if not named:
                raise pickle.UnpicklingError(f"persistent id {pid!r:.80} does not name the payload's executable")
            serialized = pid[1] if self._executable is None else self._executable
            try:
                loaded = _load_executable(self._client, serialized, self._devices, self._options)
            except Exception as e:
                self.xla_error = e
                raise
            # Loaded without lowering: fill the kernel tables its custom calls need before anything runs it.
            make_ready(loaded, self._client.platform, serialized=serialized)
            return loaded
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.80}")
