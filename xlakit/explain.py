"""Why a program misses: the parts of its key that differ from the nearest entry of the same function.

An :class:`Explanation` compares what a lookup would use now (JAX's per-part key hashes, the environment
partition, the entry signature of the StableHLO module, the module text) with the entry of the same
function whose parts differ least. It renders as a table in a terminal (``str``) and in a notebook
(``_repr_html_``).
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from xlakit._text.untrusted import html_text

__all__ = ["Difference", "Explanation", "compare"]

# JAX's key part -> the kind a person recognises; parts explained better by the signature are skipped.
_PART_KINDS = {
    "jax_lib version": "jaxlib version",
    "backend version": "backend",
    "XLA flags": "flags",
    "compile_options": "compile options",
    "accelerator_config": "devices",
    "placement": "devices",  # device count, kinds, mesh shape and process layout (never concrete ids)
    "compression": "compression",
    "custom_hook": "custom hook",
}
_ENV_KINDS = {
    "jax_version": "jax version", "jaxlib_version": "jaxlib version", "jaxlib_build": "jaxlib build",
    "platform": "backend", "platform_version": "backend", "runtime_type": "backend",
    "device_kinds": "devices", "device_count": "devices", "process_count": "devices",
    "compute_capability": "devices", "machine": "host", "cpu_flags_hash": "host", "cpu_level": "host",
    "xla_flags": "flags",
}


@dataclasses.dataclass(frozen=True)
class Difference:
    """One differing part. ``kind`` is one of: module, shape, dtype, sharding, donation, flags,
    jax version, jaxlib version, jaxlib build, backend, devices, host, compile options, compression,
    custom hook. ``now`` and ``entry`` are readable values (hashes where nothing readable exists)."""

    kind: str
    part: str
    now: Any
    entry: Any


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The outcome a lookup would have now, and why.

    Attributes:
      name: HLO module name (``jit_<function>``).
      key: the key the lookup uses now.
      partition: this environment's partition.
      status: ``"hit"`` (an entry with this key exists here and this process can run it: a lookup loads it),
        ``"unrunnable"`` (the entry exists but this process cannot run it without lowering: a lookup compiles;
        ``reason`` says why), ``"miss"`` (none; see ``nearest``), or ``"new"`` (no entry of this function exists
        anywhere in the cache).
      nearest: key and partition of the entry of the same function whose parts differ least, or None.
      differences: what differs from ``nearest``, most telling first.
      module_diff: unified diff of the module text (no debug locations) when the module itself changed.
      reason: for ``"unrunnable"``, why (the kernels or host code the entry needs), else None.
    """

    name: str
    key: str
    partition: str
    status: str
    nearest: dict[str, Any] | None = None
    differences: tuple[Difference, ...] = ()
    module_diff: str | None = None
    reason: str | None = None

    @property
    def kinds(self) -> list[str]:
        """The distinct kinds of the differences, in order."""
        return list(dict.fromkeys(d.kind for d in self.differences))

    def to_frame(self):
        """``pandas.DataFrame`` with columns kind, part, now, entry."""
        import pandas as pd

        return pd.DataFrame([dataclasses.asdict(d) for d in self.differences], columns=["kind", "part", "now", "entry"])

    def summary(self) -> str:
        if self.status == "hit":
            return f"{self.name}: hit in {self.partition}"
        if self.status == "unrunnable":
            return f"{self.name}: entry found in {self.partition}, but it will compile — {self.reason}"
        if self.status == "new":
            return f"{self.name}: miss — no entry of this function in the cache yet"
        where = self.nearest["partition"] if self.nearest else "?"
        return (f"{self.name}: miss — nearest entry ({where}) differs in: "
                f"{', '.join(self.kinds) or 'nothing readable (same parts, different key)'}")

    def __str__(self) -> str:
        lines = [self.summary()]
        if self.differences:
            width = max(len(d.part) for d in self.differences)
            lines += [f"  {d.kind:<15} {d.part:<{width}}  now: {_short(d.now)}   entry: {_short(d.entry)}"
                      for d in self.differences]
        if self.module_diff:
            lines += ["", self.module_diff]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{html_text(d.kind)}</td><td>{html_text(d.part)}</td>"
                       f"<td><code>{html_text(_short(d.now))}</code></td>"
                       f"<td><code>{html_text(_short(d.entry))}</code></td></tr>" for d in self.differences)
        table = (f"<table><tr><th>kind</th><th>part</th><th>now</th><th>entry</th></tr>{rows}</table>"
                 if rows else "")
        diff = f"<pre>{html_text(self.module_diff)}</pre>" if self.module_diff else ""
        return f"<p><b>{html_text(self.summary())}</b></p>{table}{diff}"


def _short(value: Any, limit: int = 120) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _signature_differences(now: list | None, entry: list | None, paths: list[str] | None = None
                           ) -> list[Difference]:
    """Per ``@main`` argument, what differs; ``paths``: the function's argument path of each ``@main`` argument
    (JAX leaves unused arguments out and flattens pytrees, so the position is not the function's argument)."""
    if now is None or entry is None:
        return []
    if len(now) != len(entry):
        return [Difference("shape", "arguments", f"{len(now)} arguments", f"{len(entry)} arguments")]
    named = paths if paths is not None and len(paths) == len(now) else None
    out = []
    for i, (a, b) in enumerate(zip(now, entry, strict=True)):
        for field in ("shape", "dtype", "sharding", "donation"):
            if a.get(field) != b.get(field):
                out.append(Difference(field, f"argument {named[i]}" if named else f"argument {i}", a.get(field),
                                      b.get(field)))
    return out


def compare(now: dict[str, Any], entry_header: dict[str, Any]) -> tuple[list[Difference], str | None]:
    """Differences between the parts of a lookup now and an entry's header.

    ``now`` has ``key_parts`` (JAX's per-part hashes), ``environment`` (dict), ``signature`` (list of
    argument records), ``module_text`` (str or None) and optionally ``paths`` (the function's argument path of each
    ``@main`` argument, to name them); the header has the same fields (``module_text`` decoded by the caller).
    """
    diffs: list[Difference] = []
    signature = _signature_differences(now.get("signature"), entry_header.get("signature"), now.get("paths"))
    diffs += signature
    now_parts, old_parts = now.get("key_parts") or {}, entry_header.get("key_parts") or {}
    module_diff = None
    if now_parts.get("computation") != old_parts.get("computation") and not signature:
        a, b = now.get("module_text"), entry_header.get("module_text")
        if a is not None and b is not None and a != b:
            module_diff = "".join(difflib.unified_diff(b.splitlines(True), a.splitlines(True), "entry", "now", n=2))
        diffs.append(Difference("module", "computation", now_parts.get("computation"), old_parts.get("computation")))
    env_now, env_old = now.get("environment") or {}, entry_header.get("environment") or {}
    env_kinds_seen = set()
    for field, kind in _ENV_KINDS.items():
        if env_now.get(field) != env_old.get(field):
            diffs.append(Difference(kind, field, env_now.get(field), env_old.get(field)))
            env_kinds_seen.add(kind)
    for part, kind in _PART_KINDS.items():
        if now_parts.get(part) != old_parts.get(part) and kind not in env_kinds_seen:
            # Donation and sharding also change the compile options; say it only if nothing explains it.
            if kind == "compile options" and signature:
                continue
            diffs.append(Difference(kind, part, now_parts.get(part), old_parts.get(part)))
    return diffs, module_diff
