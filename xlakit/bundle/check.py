"""``check_bundle``: what a bundle holds and what the next load would do, without JAX and without changing
anything (the ``xlakit bundle check`` command).

It reads the manifest, hashes every module file, compares with ``.cache/module_hashes.json``, lists the
partitions of ``.cache`` and which of them hold a program for each module's current bytes, checks the
weights file's header (names, shapes, dtypes) against the manifest, and lists the programs a load would
remove (:func:`xlakit.bundle.hashes.plan_drops`). Modules are not deserialized (that needs JAX): a file
that is not a ``jax.export`` artifact is found by ``load_bundle``.

The one thing it changes: temp files left in the bundle folder by a killed ``export_bundle`` (writer gone,
or older than :data:`xlakit.bundle.files.STALE_TEMP_S`) are removed and listed in ``removed_temps``. A module
that is not a regular file (FIFO, device, folder, symlink to ``/dev/zero``) or is over
:data:`~xlakit.bundle.files.MAX_MODULE_BYTES` is never opened for reading; it is a problem naming the file.
A ``.cache`` that is a symlink is never followed (a problem says so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlakit.bundle.errors import BundleError
from xlakit.bundle.files import MAX_MODULE_BYTES, cache_problem, read_regular, remove_stale_temps
from xlakit.bundle.hashes import RECORD, Drop, RecordState, _is_entry, plan_drops, program_key, read_record, sha256_hex
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
      batch_size is None for a shape-polymorphic module (``model.bpoly.jaxexp``); its ``partitions`` hold
      programs compiled from it at ``exact_sizes`` (the batch sizes a call asked for that were not exported, or
      every new size with ``load_bundle(exact=True)``).
    """

    file: str
    variant: str
    batch_size: int | None
    size_bytes: int | None
    sha256: str | None
    recorded: str | None
    state: str
    partitions: tuple[str, ...]
    exact_sizes: tuple[int, ...] = ()


def _keys(store: Any, partition: str) -> list[str]:
    """The entry keys of one partition of the bundle's ``.cache`` (headers are not verified here)."""
    try:
        return [str(info.key) for info in store.entries(partition)]
    except OSError:
        return []


@dataclass(frozen=True)
class BundleCheck:
    """The result of :func:`check_bundle`. ``ok`` is True when nothing would fail to load.

    ``removed_temps``: stale temp files of a killed export that were removed; ``cache_problem``: why
    ``.cache`` is not used (a symlink, not a folder), else None."""

    path: Path
    manifest: Manifest | None
    modules: tuple[ModuleCheck, ...] = ()
    record_status: str = "missing"
    record_reason: str | None = None
    partitions: dict[str, int] = field(default_factory=dict)
    drops: tuple[Drop, ...] = ()
    problems: tuple[str, ...] = ()
    removed_temps: tuple[str, ...] = ()
    cache_problem: str | None = None

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
                "would_drop": [d.__dict__ for d in self.drops], "removed_temps": list(self.removed_temps),
                "cache_problem": self.cache_problem}

    def __repr__(self) -> str:
        name = self.manifest.name if self.manifest else "?"
        return (f"BundleCheck({name!r}: {'ok' if self.ok else f'{len(self.problems)} problem(s)'}, "
                f"{len(self.modules)} modules, {len(self.partitions)} partitions, {len(self.drops)} to drop)")


def check_bundle(path: str | os.PathLike) -> BundleCheck:
    """Inspect a bundle folder; never raises for the bundle's content (problems are listed instead).

    Reads are bounded and non-blocking (see the module docstring); the only change made is the removal of
    stale temps of a killed export. Raises nothing for a bad bundle; an OSError only when ``path`` itself
    cannot be listed."""
    from xlakit.store import LocalStore

    path = Path(os.path.expanduser(path))  # "~/x" is the home folder, never a folder named "~"
    removed = tuple(str(p) for p in remove_stale_temps(path))
    try:
        manifest = Manifest.read(path)
    except BundleError as e:
        return BundleCheck(path, None, problems=(str(e),), removed_temps=removed)
    problems: list[str] = []
    try:
        wfile = path / manifest.weights_file
        check_weights(wfile, read_weight_specs(wfile), manifest.weights)
    except BundleError as e:
        problems.append(str(e))

    cache_dir = path / CACHE_DIR
    unusable = cache_problem(cache_dir)
    if unusable:
        problems.append(f"{unusable}; a load compiles every module and stores nothing")
        store = None
        record = RecordState("missing", {}, None, cache_dir / RECORD)
    else:
        store = LocalStore(cache_dir)
        record = read_record(cache_dir)
    if record.status == "unreadable":
        problems.append(f"{record.path}: unreadable ({record.reason}); a load rewrites it")
    specs = manifest.modules + manifest.poly_modules
    current: dict[str, str | None] = {}
    sizes: dict[str, int | None] = {}
    for spec in specs:
        try:
            data = read_regular(path / spec.file, MAX_MODULE_BYTES)
        except OSError as e:
            current[spec.file], sizes[spec.file] = None, None
            problems.append(f"{path / spec.file}: {'missing' if isinstance(e, FileNotFoundError) else e}")
            continue
        current[spec.file], sizes[spec.file] = sha256_hex(data), len(data)
        want = manifest.module_sha256.get(spec.file)
        if want is not None and current[spec.file] != want:
            problems.append(f"{path / spec.file}: not the bytes manifest.json recorded at export (replaced or edited "
                            "since): a load refuses it; export the bundle again")

    partitions = [p for p in store.partitions() if cache_problem(cache_dir, p) is None] if store else []
    modules = []
    for spec in specs:
        sha = current[spec.file]
        recorded = record.hashes.get(spec.file)
        if sha is None:
            state = "missing"
        elif recorded is None:
            state = "new"
        else:
            state = "unchanged" if recorded == sha else "changed"
        exact: set[int] = set()
        if spec.batch_size is None and sha and store is not None:  # programs at the sizes calls asked for
            base = program_key(spec.file, sha) + "-b"
            found = {p: {int(k[len(base):]) for k in _keys(store, p) if k.startswith(base) and k[len(base):].isdigit()}
                     for p in partitions}
            held = tuple(p for p in partitions if found[p])
            exact = set().union(*found.values()) if found else set()
        else:
            held = tuple(p for p in partitions if sha and store is not None
                         and _is_entry(store.entry_path(p, program_key(spec.file, sha))))
        modules.append(ModuleCheck(spec.file, spec.variant, spec.batch_size, sizes[spec.file], sha, recorded, state,
                                   held, tuple(sorted(exact))))
    counts = {p: len(store.entries(p)) for p in partitions} if store is not None else {}
    drops = tuple(plan_drops(store, record, current)) if store else ()
    return BundleCheck(path, manifest, tuple(modules), record.status, record.reason, counts, drops,
                       tuple(problems), removed, unusable)
