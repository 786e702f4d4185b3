"""The environment partition: everything outside a program that decides whether its executable can be reused.

A compiled XLA executable is only valid for the jaxlib build, backend, devices, host CPU features and
code-generating ``XLA_FLAGS`` it was compiled under. :class:`Environment` records those values and
:meth:`Environment.partition_name` turns them into a readable folder name, so executables from different
environments never meet.

Importing this module is cheap: JAX is imported inside the functions that need it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform as _platform
import re
from typing import Any

from xlakit._jax.fingerprint import _prefetched_fingerprint, jaxlib_build_fingerprint
from xlakit._record import Record

__all__ = ["Environment", "current_environment", "expectations"]

# XLA flags that only decide what gets dumped or logged; they never change the generated code.
_OUTPUT_ONLY_FLAG_PREFIXES = ("--xla_dump", "--xla_log", "--xla_gpu_dump", "--xla_enable_dumping")
# XLA flags that change what the process has (how many host devices), not what a program compiles to (JAX's key).
_PROCESS_ONLY_FLAGS = frozenset({"--xla_force_host_platform_device_count"})
# Environment fields recorded for people (explain, the CLI) that do not partition. How many devices or processes
# this process has changes neither a program's code nor whether it loads: the program's own device count, kinds
# and process layout are in its key (xlakit._jax.keys), and the stored device assignment is checked against the
# caller's before XLA sees it.
RECORDED_ONLY = frozenset({"device_count", "process_count"})
# The host CPU's fields, which partition only where the platform's programs carry host code
# (:attr:`xlakit._jax.platforms.Platform.host_cpu_partitions`; on TPU an entry with host code records them itself).
HOST_CPU_FIELDS = frozenset({"cpu_flags_hash", "cpu_level"})
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


class Environment(Record):
    """The values an executable's validity depends on, beyond the program itself.

    Attributes:
      jax_version: ``jax.__version__``.
      jaxlib_version: ``jaxlib.version.__version__``.
      jaxlib_build: 16 hex digits identifying the jaxlib build itself (see :func:`jaxlib_build_fingerprint`);
        two builds with the same version string (nightlies, local builds) still differ here.
      platform: ``backend.platform``, e.g. ``"cpu"``, ``"gpu"``, ``"tpu"``.
      platform_version: ``backend.platform_version`` (on GPU it names the CUDA/ROCm versions).
      runtime_type: ``backend.runtime_type``, or ``""`` where the backend has none.
      device_kinds: sorted distinct ``device.device_kind`` of ``jax.devices(backend)``.
      device_count: ``len(jax.devices(backend))``.
      process_count: ``jax.process_count(backend)``.
      compute_capability: ``str(device.compute_capability)`` of device 0 (e.g. ``"9.0"``), ``None`` where
        the device has none (CPU, TPU).
      machine: ``platform.machine()``, e.g. ``"x86_64"``.
      cpu_flags_hash: 8 hex digits of SHA-256 over the sorted ``flags`` (x86) or ``Features`` (ARM) of the
        first CPU in ``/proc/cpuinfo``; ``""`` where that file is unreadable (non-Linux).
      cpu_level: readable CPU tier: ``"avx512"``, ``"avx2"``, ``"avx"``, ``"sse4"`` on x86, ``"sve"`` or
        ``"neon"`` on ARM, else ``machine``.
      xla_flags: the code-generating tokens of ``os.environ["XLA_FLAGS"]``: sorted, the last value kept per
        flag name, without dump/log flags (``--xla_dump*``, ``--xla_log*``, ``--xla_gpu_dump*``,
        ``--xla_enable_dumping``) and without ``--xla_force_host_platform_device_count``.

    ``device_count`` and ``process_count`` are recorded but do not partition (``RECORDED_ONLY``); nor do the host
    CPU's fields on a platform whose executables run on the device (TPU: measured, only ``HostExecute`` programs
    embed host code, and their entries record the CPU themselves), see :meth:`recorded_only`.
    """

    jax_version: str
    jaxlib_version: str
    jaxlib_build: str
    platform: str
    platform_version: str
    runtime_type: str
    device_kinds: tuple[str, ...]
    device_count: int
    process_count: int
    compute_capability: str | None
    machine: str
    cpu_flags_hash: str
    cpu_level: str
    xla_flags: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field, tuples as lists."""
        return {name: _jsonable(value) for name, value in zip(self._fields, self, strict=True)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Environment:
        """Inverse of :meth:`to_dict`. Raises ValueError if ``data`` lacks a field or has an unknown one."""
        names = cls._fields
        missing = sorted(set(names) - data.keys())
        unknown = sorted(data.keys() - set(names))
        if missing or unknown:
            raise ValueError(f"not an Environment dict: missing fields {missing}, unknown fields {unknown}")
        return cls(**{name: tuple(data[name]) if isinstance(data[name], list) else data[name]  # type: ignore[arg-type]
                      for name in names})

    def recorded_only(self) -> frozenset[str]:
        """The fields recorded for people that do not partition here: ``RECORDED_ONLY``, plus the host CPU's
        fields where the platform table says the host CPU does not decide loadability."""
        from xlakit._jax.platforms import rules

        return RECORDED_ONLY if rules(self.platform).host_cpu_partitions else RECORDED_ONLY | HOST_CPU_FIELDS

    def digest(self) -> str:
        """Full hex SHA-256 over the canonical JSON (sorted keys, no whitespace) of :meth:`to_dict` without the
        fields that do not partition (:meth:`recorded_only`)."""
        skip = self.recorded_only()
        fields = {k: v for k, v in self.to_dict().items() if k not in skip}
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return _sha256(canonical)

    def partition_name(self) -> str:
        """Readable folder name, unique per environment.

        ``{platform}[-sm{cc}]-jaxlib{jaxlib_version}-{machine}-{cpu_level}-{digest[:8]}``, e.g.
        ``cpu-jaxlib0.10.2-x86_64-avx2-1a2b3c4d`` or ``gpu-sm90-jaxlib0.10.2-x86_64-avx512-...``; where the host
        CPU does not partition, the device kind stands in its place: ``tpu-TPU_v5_lite-jaxlib0.10.2-x86_64-...``.
        The readable parts are for people; the digest makes it unique. Only ``[A-Za-z0-9_.-]`` occur.
        """
        parts = [self.platform]
        if self.compute_capability:
            parts.append("sm" + self.compute_capability.replace(".", ""))
        host_cpu = "cpu_level" not in self.recorded_only()
        if not host_cpu:
            parts.append("+".join(self.device_kinds) or "device")
        parts += ["jaxlib" + self.jaxlib_version, self.machine]
        if host_cpu:
            parts.append(self.cpu_level)
        parts.append(self.digest()[:8])
        return "-".join(_safe_name(part) for part in parts)

    def differences(self, other: Environment) -> list[tuple[str, Any, Any]]:
        """``(field, value here, value in other)`` for each field that differs, in declaration order."""
        return [(name, mine, theirs) for name, mine, theirs in zip(self._fields, self, other, strict=True)
                if mine != theirs]


@functools.cache
def current_environment(backend: str | None = None) -> Environment:
    """The :class:`Environment` of this process for ``backend`` (``None``: JAX's default backend).

    Memoized per ``backend`` for the life of the process (``current_environment.cache_clear()`` resets it), so
    ``XLA_FLAGS`` is read when first computed; that matches JAX, which reads the flags once when the backend
    starts, and later changes affect neither.

    Raises:
      RuntimeError: from JAX if ``backend`` is unknown or absent (e.g. ``"gpu"`` on a CPU-only install).
    """
    import jax
    from jaxlib import version as jaxlib_version

    devices = jax.devices(backend)
    client = devices[0].client  # the backend itself; jax.extend.backend would import Pallas (~0.1-0.3 s) first
    build = _prefetched_fingerprint()
    capability = getattr(devices[0], "compute_capability", None)
    machine = _platform.machine()
    cpu_flags = _cpu_flags()
    return Environment(
        jax_version=jax.__version__,
        jaxlib_version=jaxlib_version.__version__,
        jaxlib_build=build if build is not None else jaxlib_build_fingerprint(),
        platform=client.platform,
        platform_version=client.platform_version,
        runtime_type=getattr(client, "runtime_type", ""),
        device_kinds=tuple(sorted({d.device_kind for d in devices})),
        device_count=len(devices),
        process_count=jax.process_count(backend),
        compute_capability=None if capability is None else str(capability),
        machine=machine,
        cpu_flags_hash="" if cpu_flags is None else _sha256(" ".join(sorted(cpu_flags)))[:8],
        cpu_level=_cpu_level(machine, cpu_flags or frozenset()),
        xla_flags=codegen_xla_flags(os.environ.get("XLA_FLAGS", "")),
    )


def codegen_xla_flags(xla_flags: str) -> tuple[str, ...]:
    """The tokens of an ``XLA_FLAGS`` string that can change generated code: sorted, last value per flag name,
    dump/log flags and ``--xla_force_host_platform_device_count`` dropped. Quoted values are kept whole
    (``shlex``); unbalanced quotes fall back to splitting on whitespace."""
    if not xla_flags.strip():
        return ()
    import shlex

    try:
        tokens = shlex.split(xla_flags)
    except ValueError:
        tokens = xla_flags.split()
    by_name = {}
    for token in tokens:
        if not token.startswith(_OUTPUT_ONLY_FLAG_PREFIXES) and token.split("=", 1)[0] not in _PROCESS_ONLY_FLAGS:
            by_name[token.split("=", 1)[0]] = token  # XLA applies flags in order, so the last one wins.
    return tuple(sorted(by_name.values()))


_EXPECTED_FIELDS = ("jax_version", "jaxlib_version", "jaxlib_build", "platform", "platform_version", "machine",
                    "cpu_flags_hash")


def expectations(env: Environment) -> dict[str, Any]:
    """Header fields an entry must carry to be loaded in ``env``: another build's programs are never loaded.
    The host CPU's hash only where it partitions (elsewhere an entry with host code carries ``host_cpu``)."""
    values, skip = env.to_dict(), env.recorded_only()
    return {name: values[name] for name in _EXPECTED_FIELDS if name not in skip}


def _cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The ``flags`` (x86) or ``Features`` (ARM) of the first CPU in ``cpuinfo``; ``None`` if unreadable."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


def _cpu_level(machine: str, flags: frozenset[str]) -> str:
    if machine.lower() in ("aarch64", "arm64"):
        return "sve" if "sve" in flags else "neon"  # every aarch64 CPU has NEON
    for flag, level in (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4"),
                        ("sse4_1", "sse4")):
        if flag in flags:
            return level
    return machine or "unknown"


def _safe_name(part: str) -> str:
    """``part`` with every run of characters outside ``[A-Za-z0-9_.-]`` replaced by ``_``; ``unknown`` if empty."""
    if part and _NAME_CHARS.issuperset(part):
        return part
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", part) or "unknown"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
