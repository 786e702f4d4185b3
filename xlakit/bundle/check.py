"""``check_bundle``: what a bundle holds and what the next load would do, without JAX and without changing
anything (the ``xlakit bundle check`` command).

It reads the manifest, hashes every module file, compares with ``.cache/module_hashes.json``, lists the
partitions of ``.cache`` and which of them hold a program for each module's current bytes, checks the
weights file's header (names, shapes, dtypes) against the manifest, and lists the programs a load would
remove (:func:`xlakit.bundle.hashes.plan_drops`). Modules are not deserialized (that needs JAX): a file
that is not a ``jax.export`` artifact is found by ``load_bundle``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlakit.bundle.errors import BundleError
from xlakit.bundle.hashes import Drop, plan_drops, program_key, read_record, sha256_hex
from xlakit.bundle.manifest import CACHE_DIR, Manifest
from xlakit.bundle.weights import check_weights, read_weight_specs

__all__ = ["check_bundle", "BundleCheck", "ModuleCheck"]


@dataclass(frozen=True)
class ModuleCheck:
    """One module file.

    Attributes:
      file, variant, batch_size: which module.
      size_bytes: file size, None if missing. sha256: hex digest now, None if missing.
      recorded: the digest in ``module_hashes.json``, None if not recorded (or the record is unreadable).
      state: ``"unchanged"``, ``"changed"`` (its programs will be dropped), ``"new"`` (not recorded yet) or
        ``"missing"`` (the file is gone).
      partitions: partitions of ``.cache`` holding a program compiled from the current bytes.
    """

    file: str
    variant: str
    batch_size: int
    size_bytes: int | None
    sha256: str | None
    recorded: str | None
    state: str
    partitions: tuple[str, ...]


@dataclass(frozen=True)
class BundleCheck:
    """The result of :func:`check_bundle`. ``ok`` is True when nothing would fail to load."""

    path: Path
    manifest: Manifest | None
    modules: tuple[ModuleCheck, ...] = ()
    record_status: str = "missing"
    record_reason: str | None = None
    partitions: dict[str, int] = field(default_factory=dict)
    drops: tuple[Drop, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_frame(self):
        """``pandas.DataFrame`` of :attr:`modules` (one row per module file)."""
        import pandas as pd

        rows = [{**m.__dict__, "partitions": ", ".join(m.partitions)} for m in self.modules]
        return pd.DataFrame(rows, columns=[f for f in ModuleCheck.__dataclass_fields__])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"path": str(self.path), "ok": self.ok, "problems": list(self.problems),
                "manifest": self.manifest.to_dict() if self.manifest else None,
                "modules": [{**m.__dict__, "partitions": list(m.partitions)} for m in self.modules],
                "record": {"status": self.record_status, "reason": self.record_reason},
                "partitions": dict(self.partitions),
                "would_drop": [d.__dict__ for d in self.drops]}

    def __repr__(self) -> str:
        name = self.manifest.name if self.manifest else "?"
        return (f"BundleCheck({name!r}: {'ok' if self.ok else f'{len(self.problems)} problem(s)'}, "
                f"{len(self.modules)} modules, {len(self.partitions)} partitions, {len(self.drops)} to drop)")


def check_bundle(path: str | os.PathLike) -> BundleCheck:
    """Inspect a bundle folder; never raises for the bundle's content (problems are listed instead)."""
    from xlakit.store import LocalStore

    path = Path(path)
    try:
        manifest = Manifest.read(path)
    except BundleError as e:
        return BundleCheck(path, None, problems=(str(e),))
    problems: list[str] = []
    try:
        wfile = path / manifest.weights_file
        check_weights(wfile, read_weight_specs(wfile), manifest.weights)
    except BundleError as e:
        problems.append(str(e))

    store = LocalStore(path / CACHE_DIR)
    record = read_record(store.root)
    if record.status == "unreadable":
        problems.append(f"{record.path}: unreadable ({record.reason}); a load rewrites it")
    current: dict[str, str | None] = {}
    sizes: dict[str, int | None] = {}
    for spec in manifest.modules:
        try:
            data = (path / spec.file).read_bytes()
        except OSError as e:
            current[spec.file], sizes[spec.file] = None, None
            problems.append(f"{path / spec.file}: {'missing' if isinstance(e, FileNotFoundError) else e}")
            continue
        current[spec.file], sizes[spec.file] = sha256_hex(data), len(data)

    partitions = store.partitions()
    modules = []
    for spec in manifest.modules:
        sha = current[spec.file]
        recorded = record.hashes.get(spec.file)
        if sha is None:
            state = "missing"
        elif recorded is None:
            state = "new"
        else:
            state = "unchanged" if recorded == sha else "changed"
        held = tuple(p for p in partitions if sha and store.entry_path(p, program_key(spec.file, sha)).exists())
        modules.append(ModuleCheck(spec.file, spec.variant, spec.batch_size, sizes[spec.file], sha, recorded, state,
                                   held))
    counts = {p: len(store.entries(p)) for p in partitions}
    return BundleCheck(path, manifest, tuple(modules), record.status, record.reason, counts,
                       tuple(plan_drops(store, record, current)), tuple(problems))
