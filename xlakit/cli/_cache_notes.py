"""What ``xlakit cache prune|verify|clear`` say they left in the local folder: what a prune could not remove, by
kind with bytes, and the files named like entries that none of them touches (a user's ``logs/notes.xlk``)."""

from __future__ import annotations

import sys

from xlakit.cli._common import EXAMPLES, print_bounded

__all__ = ["what_remains", "left_alone"]


def what_remains(store) -> str:
    """What a prune left in the folder, by kind, with bytes on disk (:func:`xlakit.store.evict.counted_files`):
    the store's own files named one by one, entries (another key's, or ones still being written or that could not
    be removed), quarantined files, and files that are not xlakit's with a few of their names."""
    from xlakit.store.evict import OWN_ROOT_FILES, removable
    from xlakit.store.layout import ENTRY_SUFFIX, PARTITION_INFO, USED_SUFFIX

    files = store.counted_files()
    try:
        secret: bytes | None = store.secret
    except OSError:  # no secret: another key's entries cannot be told apart, and prune removed none
        secret = None

    def total(group: list[tuple[str, str, int]]) -> int:
        return sum(size for _, _, size in group)

    def files_of(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    parts = []
    own = [f for f in files if f[0] == "own"]
    if own:
        named = [f"{name} {total([f for f in own if f[1] == name])} bytes" for name in OWN_ROOT_FILES
                 if any(f[1] == name for f in own)]
        infos = [f for f in own if f[1].endswith("/" + PARTITION_INFO)]
        if infos:
            named.append(f"{PARTITION_INFO} {total(infos)} bytes"
                         + (f" (in {files_of(len(infos), 'partition', 'partitions')})" if len(infos) > 1 else ""))
        marks = [f for f in own if f not in infos and f[1] not in OWN_ROOT_FILES]
        if marks:
            named.append(f"{files_of(len(marks), 'last-use mark', 'last-use marks')} whose entry is gone "
                         f"{total(marks)} bytes")
        parts.append(f"the store's own files, {total(own)} bytes ({', '.join(named)})")
    entries = [f for f in files if f[0] == "entry"]
    theirs = [f for f in entries if f[1].endswith(ENTRY_SUFFIX) and (
        secret is None or not removable(store.root / f[1], secret))]
    if theirs:
        # their .used marks go with them
        stems = {f[1].removesuffix(ENTRY_SUFFIX) for f in theirs}
        group = [f for f in entries if f[1].removesuffix(ENTRY_SUFFIX).removesuffix(USED_SUFFIX) in stems]
        them = "it" if len(theirs) == 1 else "them"
        why = (f"signed with another key: only that key's owner may evict {them}" if secret is not None
               else "no secret to tell this key's entries from another's, so none are evicted")
        parts.append(f"{files_of(len(theirs), 'entry', 'entries')}, {total(group)} bytes ({why})")
        entries = [f for f in entries if f not in group]
    if entries:
        n = sum(f[1].endswith(ENTRY_SUFFIX) for f in entries)
        parts.append(f"{files_of(n, 'entry', 'entries')}, {total(entries)} bytes (written while pruning, or "
                     "could not be removed)")
    quarantined = [f for f in files if f[0] == "quarantined"]
    if quarantined:
        parts.append(f"{files_of(len(quarantined), 'quarantined file', 'quarantined files')}, {total(quarantined)} "
                     "bytes (could not be removed)")
    foreign = sorted(f for f in files if f[0] == "foreign")
    if foreign:
        shown = ", ".join(f[1] for f in foreign[:EXAMPLES]) + (", ..." if len(foreign) > EXAMPLES else "")
        parts.append(f"{files_of(len(foreign), 'file', 'files')} that are not xlakit's, {total(foreign)} bytes "
                     f"({shown})")
    return "; ".join(parts) or "nothing now (the folder changed while pruning)"


def left_alone(store, quiet: bool) -> list[str]:
    """The files named like entries that verify, prune and clear left alone (:meth:`LocalStore.left_alone`: in a
    folder of the user's own beside the partitions, ``logs/notes.xlk``, or in a partition but no entry of the
    store's); said on stderr, bounded, unless ``quiet`` (``--json`` lists them all, as ``left_alone``)."""
    left = store.left_alone() if store.root.is_dir() else []
    if left and not quiet:
        print(f"note: {len(left)} file{'s' if len(left) != 1 else ''} named like entries left alone: not the store's "
              "entries in an environment partition, so never evicted, quarantined or removed", file=sys.stderr)
        print_bounded([(name.partition("/")[0] + "/", name) for name in left], "files left alone",
                      "--json lists them all (left_alone)", prefix="note:   ", file=sys.stderr)
    return left
