"""``PJRT_Device_ClearMemoryStats``: the allocator peak reset that JAX does not bind, called through the PJRT C API
of the plugin behind a backend (libtpu; a CUDA plugin the same way).

XLA's C++ has ``ClearMemoryStats`` and the PJRT C API has carried ``PJRT_Device_ClearMemoryStats`` since its minor
version 106, but jaxlib binds neither (up to 0.12). A PJRT plugin exports ``GetPjrtApi() -> PJRT_Api*``: a struct
of ``struct_size``, ``extension_start``, ``PJRT_Api_Version {struct_size, extension_start, int major, int minor}``
(40 bytes on LP64), then one function pointer per C API function in the header's order; new functions are only
ever appended (the header's ABI rule), so a function's slot is ``40 + 8 * index`` and a plugin offers it when
``struct_size`` covers the slot and the pointer is not null. libtpu on a TPU v5e (cl/933746096, 2026-12-05):
version 0.112, 138 functions.

The call needs the plugin's ``PJRT_Client*`` — ``Client.unsafe_client_pointer`` (jaxlib gives it for C API
clients, 0 otherwise) — and the ``PJRT_Device*`` for a JAX device, found with ``PJRT_Client_AddressableDevices`` and
``PJRT_DeviceDescription_Id``. The ``PJRT_Api*`` comes from jaxlib where it hands it out
(``_jax.get_pjrt_plugin``, newer jaxlibs), else from the plugin library JAX loaded (opened with ``RTLD_NOLOAD``:
never a second copy), and must name the client's platform (``PJRT_Client_PlatformName``) before anything else is
called. Every step that is not offered says why (:class:`PjrtUnavailable`); nothing here is called where a check
fails, so a missing or older plugin costs a sentence, not a crashed kernel.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

__all__ = ["PjrtUnavailable", "clear_memory_stats", "api_version", "FUNCTION_INDEX"]

_HEADER = 40  # struct_size, extension_start, PJRT_Api_Version (24 bytes)
#: Positions of the functions used here in ``PJRT_Api`` (xla/pjrt/c/pjrt_c_api.h, 0-based after the header).
FUNCTION_INDEX = {"PJRT_Error_Destroy": 0, "PJRT_Error_Message": 1, "PJRT_Client_PlatformName": 12,
                  "PJRT_Client_AddressableDevices": 16, "PJRT_DeviceDescription_Id": 23,
                  "PJRT_Device_GetDescription": 29, "PJRT_Device_ClearMemoryStats": 135}
#: The first C API minor version with ``PJRT_Device_ClearMemoryStats``.
CLEAR_MEMORY_STATS_MINOR = 106


class PjrtUnavailable(RuntimeError):
    """The PJRT C API reset is not available for this device; the message says why."""


class _PlatformName(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("client", ctypes.c_void_p),
                ("platform_name", ctypes.c_void_p), ("platform_name_size", ctypes.c_size_t)]


class _AddressableDevices(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("client", ctypes.c_void_p),
                ("devices", ctypes.POINTER(ctypes.c_void_p)), ("num_devices", ctypes.c_size_t)]


class _GetDescription(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("device", ctypes.c_void_p),
                ("description", ctypes.c_void_p)]


class _DescriptionId(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("description", ctypes.c_void_p), ("id", ctypes.c_int)]


class _Device(ctypes.Structure):  # PJRT_Device_ClearMemoryStats_Args
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("device", ctypes.c_void_p)]


class _ErrorMessage(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("error", ctypes.c_void_p),
                ("message", ctypes.c_void_p), ("message_size", ctypes.c_size_t)]


class _ErrorDestroy(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("error", ctypes.c_void_p)]


_CALL = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)  # PJRT_Error* f(Args*)
_VOID_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Api:
    """A checked ``PJRT_Api*``."""

    def __init__(self, address: int) -> None:
        self.address = address
        self.struct_size = ctypes.c_size_t.from_address(address).value
        self.version = (ctypes.c_int.from_address(address + 32).value, ctypes.c_int.from_address(address + 36).value)

    def function(self, name: str) -> int | None:
        offset = _HEADER + 8 * FUNCTION_INDEX[name]
        if offset + 8 > self.struct_size:
            return None
        return ctypes.c_void_p.from_address(self.address + offset).value

    def call(self, name: str, args: ctypes.Structure) -> None:
        pointer = self.function(name)
        if not pointer:
            raise PjrtUnavailable(f"the plugin does not offer {name}")
        error = _CALL(pointer)(ctypes.addressof(args))
        if error:
            raise PjrtUnavailable(f"{name} failed: {self._message(error)}")

    def _message(self, error: int) -> str:
        text = "(no message)"
        message, destroy = self.function("PJRT_Error_Message"), self.function("PJRT_Error_Destroy")
        if message:
            m = _ErrorMessage(ctypes.sizeof(_ErrorMessage), None, error, None, 0)
            _VOID_CALL(message)(ctypes.addressof(m))
            if m.message:
                text = ctypes.string_at(m.message, m.message_size).decode("utf-8", "replace")
        if destroy:
            _VOID_CALL(destroy)(ctypes.addressof(_ErrorDestroy(ctypes.sizeof(_ErrorDestroy), None, error)))
        return text


_lock = threading.Lock()
_resolved: dict[int, tuple[_Api, dict[int, int]]] = {}  # client pointer -> (api, device id -> PJRT_Device*)


def _api_from_jaxlib(platform: str) -> int | None:
    try:
        from jax._src.lib import _jax
    except ImportError:
        return None
    get = getattr(_jax, "get_pjrt_plugin", None)
    if get is None:
        return None
    try:
        capsule = get(platform)
    except Exception:  # noqa: BLE001 - not a plugin platform
        return None
    getter = ctypes.pythonapi.PyCapsule_GetPointer
    getter.restype, getter.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return getter(capsule, b"pjrt_c_api")


def _plugin_libraries(platform: str) -> list[str]:
    """Shared libraries mapped into this process that may be ``platform``'s PJRT plugin, best guess first."""
    found: list[str] = []
    if platform == "tpu":
        try:
            from jax._src.cloud_tpu_init import get_tpu_library_path

            path = get_tpu_library_path()
            if path:
                found.append(path)
        except Exception:  # noqa: BLE001
            pass
    words = {"tpu": ("libtpu", "tpu"), "gpu": ("cuda", "pjrt"), "cuda": ("cuda", "pjrt"), "rocm": ("rocm",)}.get(
        platform, (platform,))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                name = os.path.basename(path)
                if path.startswith("/") and ".so" in name and any(w in name for w in words) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _api_from_library(platform: str) -> tuple[int | None, str]:
    tried = []
    for path in _plugin_libraries(platform):
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # only a library already loaded
        except OSError:
            tried.append(f"{path} (not loaded)")
            continue
        get = getattr(lib, "GetPjrtApi", None)
        if get is None:
            tried.append(f"{path} (no GetPjrtApi)")
            continue
        get.restype, get.argtypes = ctypes.c_void_p, []
        return get(), path
    return None, "; ".join(tried) or "no plugin library of this platform is loaded in this process"


def _resolve(device: Any) -> tuple[_Api, int]:
    client = getattr(device, "client", None)
    pointer = getattr(client, "unsafe_client_pointer", 0) if client is not None else 0
    pointer = pointer() if callable(pointer) else pointer
    if not isinstance(pointer, int) or not pointer:
        raise PjrtUnavailable(f"{getattr(device, 'platform', '?')} is not a PJRT C API plugin in this jaxlib "
                              "(Client.unsafe_client_pointer is 0)")
    with _lock:
        known = _resolved.get(pointer)
    if known is None:
        known = _resolve_client(str(device.platform).lower(), pointer)
        with _lock:
            _resolved[pointer] = known
    api, devices = known
    found = devices.get(int(device.id))
    if found is None:
        raise PjrtUnavailable(f"device id {device.id} is not among the plugin's addressable devices {sorted(devices)}")
    return api, found


def _resolve_client(platform: str, client: int) -> tuple[_Api, dict[int, int]]:
    address = _api_from_jaxlib(platform)
    where = "jaxlib's get_pjrt_plugin"
    if not address:
        address, where = _api_from_library(platform)
    if not address:
        raise PjrtUnavailable(f"the {platform} plugin's PJRT_Api could not be found ({where})")
    api = _Api(address)
    major, minor = api.version
    if major != 0 or minor < CLEAR_MEMORY_STATS_MINOR or not api.function("PJRT_Device_ClearMemoryStats"):
        raise PjrtUnavailable(f"the {platform} plugin's PJRT C API is version {major}.{minor} with "
                              f"{(api.struct_size - _HEADER) // 8} functions: no PJRT_Device_ClearMemoryStats "
                              f"(it came with 0.{CLEAR_MEMORY_STATS_MINOR})")
    for name in FUNCTION_INDEX:
        if not api.function(name):
            raise PjrtUnavailable(f"the {platform} plugin does not offer {name}")
    named = _PlatformName(ctypes.sizeof(_PlatformName), None, client, None, 0)
    api.call("PJRT_Client_PlatformName", named)  # the client must belong to this table before anything else
    name = ctypes.string_at(named.platform_name, named.platform_name_size).decode("utf-8", "replace").lower()
    if name != platform and not (platform in ("gpu", "cuda", "rocm") and name in ("gpu", "cuda", "rocm")):
        raise PjrtUnavailable(f"the PJRT_Api found ({where}) serves platform {name!r}, not {platform!r}")
    listed = _AddressableDevices(ctypes.sizeof(_AddressableDevices), None, client, None, 0)
    api.call("PJRT_Client_AddressableDevices", listed)
    devices: dict[int, int] = {}
    for i in range(listed.num_devices):
        handle = listed.devices[i]
        described = _GetDescription(ctypes.sizeof(_GetDescription), None, handle, None)
        api.call("PJRT_Device_GetDescription", described)
        ident = _DescriptionId(ctypes.sizeof(_DescriptionId), None, described.description, 0)
        api.call("PJRT_DeviceDescription_Id", ident)
        devices[int(ident.id)] = int(handle)
    return api, devices


def api_version(device: Any) -> tuple[int, int]:
    """``(major, minor)`` of the PJRT C API behind ``device``. Raises :class:`PjrtUnavailable`."""
    api, _ = _resolve(device)
    return api.version


def clear_memory_stats(device: Any) -> str:
    """Reset the allocator statistics of ``device`` (a ``jax.Device``) with ``PJRT_Device_ClearMemoryStats``:
    afterwards ``peak_bytes_in_use`` reads ``bytes_in_use`` (and the plugin's other peaks restart likewise).

    Returns:
      A description of the call made (``"PJRT_Device_ClearMemoryStats (PJRT C API 0.112)"``).

    Raises:
      PjrtUnavailable: the plugin, this jaxlib or the device does not allow it (the message says which).
    """
    api, handle = _resolve(device)
    api.call("PJRT_Device_ClearMemoryStats", _Device(ctypes.sizeof(_Device), None, handle))
    return f"PJRT_Device_ClearMemoryStats (PJRT C API {api.version[0]}.{api.version[1]})"
