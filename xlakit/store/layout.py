"""The local cache folder's layout: names, the CACHEDIR.TAG marker, and which files are the store's own.

Layout under the root folder::

    <root>/
      CACHEDIR.TAG                        marks the folder as a cache (Cache Directory Tagging standard)
      .lock                               filelock, taken only to evict/prune/clear
      module_hashes.json                  (a bundle's .cache only) the bundle's module-hash record
      jaxlib_fingerprints.json            memo of the jaxlib build fingerprint (see xlakit._jax.environment)
      <partition>/                        one folder per environment partition
        partition.json                    environment description
        <file_stem>.xlk                   entries (see envelope.py)
        <file_stem>.used                  empty; its mtime is the entry's last use
        .<name>.<pid>.<random>.tmp        a write in progress (or a killed writer's)
      quarantine/<partition>/
        <file_stem>.<unix_ms>.xlk         entries that failed verification
        <file_stem>.<unix_ms>.reason.txt  why

Destructive operations (clear, prune, verify's quarantining) run only in a folder that carries
``CACHEDIR.TAG``. A folder without it (a round-1 cache, or one created by hand) is adopted — the tag is
written — only when it is *provably* an xlakit cache (:func:`adoption_problem`): every name in it is one
this layout produces, there is at least one partition folder, every partition folder holds a
``partition.json`` that is a JSON object and at least one ``.xlk`` entry that starts with xlakit's magic
bytes, and no folder sits where the layout expects a file. Names alone never suffice (a home folder with
``Downloads/model.xlk`` and ``Music/playlist.used`` fits the names). An empty folder, or one with no
partition, is never adopted by a destructive operation (there is nothing to remove); any other folder
raises :class:`NotACacheFolder` and nothing is deleted. A first *write* tags a folder it creates, an
existing empty folder, or a provable cache; it writes into any other folder untagged, so clear/prune will
still refuse it.

What destructive operations act on, within a cache folder: only the store's entries in partitions (:mod:`.owned`);
a user's own folder beside the partitions (``logs/`` holding a ``notes.xlk``) is never a partition.

Folders where the store expects its own file (``.lock``, an entry's ``.xlk``, its ``.used``): the store
never enters them. An empty one is removed; a non-empty one is renamed out of the way to
``.<name>.<unix_ms>.<rand>.in-the-way`` beside it (a rename of the folder itself, never recursing into it or
following a link), and the operation says so (``LocalStore.displaced``, the clear/prune message).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from pathlib import Path

import platformdirs

from . import _fs

__all__ = [
    "holds_only_store_names",
    "root_source",
    "fingerprint_memo_override",
    "is_environment_partition",
    "ENTRY_SUFFIX",
    "ENV_CACHE_DIR",
    "ENV_FINGERPRINT_MEMO_DIR",
    "LOCK_NAME",
    "PARTITION_INFO",
    "QUARANTINE",
    "STALE_TEMP_S",
    "TAG_NAME",
    "TAG_SIGNATURE",
    "TEMP_SUFFIX",
    "USED_SUFFIX",
    "CacheFolderError",
    "NotACacheFolder",
    "adoption_problem",
    "prepare_root",
    "file_stem",
    "has_tag",
    "is_stale_temp",
    "is_xlakit_shaped",
    "require_cache_folder",
    "resolve_root",
    "temp_pid",
    "validate_partition",
    "write_tag",
]

ENV_CACHE_DIR = "XLAKIT_CACHE_DIR"
ENTRY_SUFFIX = ".xlk"
USED_SUFFIX = ".used"
TEMP_SUFFIX = ".tmp"
REASON_SUFFIX = ".reason.txt"
QUARANTINE = "quarantine"
UNKNOWN_PARTITION = "_unknown"
PARTITION_INFO = "partition.json"
LOCK_NAME = ".lock"
TAG_NAME = "CACHEDIR.TAG"
TAG_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"
TAG_TEXT = (
    TAG_SIGNATURE + b"\n# This file is a cache directory tag created by xlakit (compiled XLA executables).\n"
    b"# For information about cache directory tags, see: https://bford.info/cachedir/\n"
)
BUNDLE_RECORD = "module_hashes.json"  # a bundle's .cache holds its module-hash record beside the partitions
#: A folder of its own for the fingerprint memo, for every cache (set, non-empty): see xlakit._jax.fingerprint.
ENV_FINGERPRINT_MEMO_DIR = "XLAKIT_FINGERPRINT_MEMO_DIR"
FINGERPRINT_MEMO = "jaxlib_fingerprints.json"  # per-file digests of the jaxlib build, kept beside the cache in use
STALE_TEMP_S = 3600.0  # a temp whose writer's pid is unknown is stale after this many seconds

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_TEMP = re.compile(r"^\..+\.(\d+)\.[A-Za-z0-9_]+\.tmp$")
_MAX_STEM = 150
_MAX_PARTITION = 200


class NotACacheFolder(ValueError):
    """A destructive operation was asked of a folder that is not an xlakit cache; nothing was deleted."""

    def __init__(self, root: Path, why: str):
        self.root = root
        super().__init__(
            f"{root} is not an xlakit cache folder ({why}), so nothing was deleted. Point --path / "
            f"XLAKIT_CACHE_DIR at the cache folder (see 'xlakit cache where'); if this really is a cache, "
            f"remove the files that are not xlakit's, or create {TAG_NAME} in it to mark it as one."
        )


def resolve_root(path: str | os.PathLike | None = None) -> Path:
    """Cache root: ``path``, else env ``XLAKIT_CACHE_DIR``, else the user cache dir. Creates nothing.

    A leading ``~`` or ``~user`` is expanded (:func:`os.path.expanduser`), in ``path`` and in the variable alike:
    Python does not do it, and a folder literally named ``~`` in the working directory invites ``rm -rf ~``.

    Raises ValueError for an empty ``path`` (``--path ""``) or an empty ``XLAKIT_CACHE_DIR`` that is set:
    an empty string is a mistake, not a request for the default cache.
    """
    if path is not None:
        if not os.fspath(path):
            raise ValueError("the cache path is an empty string; give a folder (or omit it for the default cache)")
        return Path(os.path.expanduser(path))
    env = os.environ.get(ENV_CACHE_DIR)
    if env is not None:
        if not env.strip():
            raise ValueError(f"{ENV_CACHE_DIR} is set but empty; set it to a folder or unset it for the default cache")
        return Path(os.path.expanduser(env))
    return Path(platformdirs.user_cache_dir("xlakit"))


def root_source(path: str | os.PathLike | None = None) -> str:
    """Where :func:`resolve_root` takes the cache root from, in words: ``"--path"`` (an explicit ``path``),
    ``"$XLAKIT_CACHE_DIR"`` (the variable is set), or ``"the user cache folder"`` (platformdirs'
    ``user_cache_dir("xlakit")``, i.e. ``$XDG_CACHE_HOME/xlakit`` or ``~/.cache/xlakit`` on Linux)."""
    if path is not None:
        return "--path"
    if os.environ.get(ENV_CACHE_DIR) is not None:
        return f"${ENV_CACHE_DIR}"
    return "the user cache folder"


def fingerprint_memo_override() -> Path | None:
    """``$XLAKIT_FINGERPRINT_MEMO_DIR`` (``~`` expanded) when set and non-empty: the fingerprint memo's folder for
    every cache; None otherwise (the memo then lives beside the cache in use)."""
    own = os.environ.get(ENV_FINGERPRINT_MEMO_DIR)
    if not own:
        return None
    path = Path(os.path.expanduser(own))
    if own not in _told_memo and os.path.exists(path) and not os.path.isdir(path):
        _told_memo.add(own)  # the memo is never written there: every process hashes jaxlib again
        import warnings

        warnings.warn(f"{ENV_FINGERPRINT_MEMO_DIR}={own!r} is not a folder, so the fingerprint memo cannot be kept "
                      "there and every process fingerprints jaxlib again; point it at a folder", RuntimeWarning,
                      stacklevel=2)
    return path


_told_memo: set[str] = set()  # values of XLAKIT_FINGERPRINT_MEMO_DIR already warned about


class CacheFolderError(OSError):
    """The cache folder cannot be used: it is a file, or it cannot be created. Raised when a cache is opened
    (``enable_cache``, ``ExecutableCache``), never at a compile."""


def prepare_root(root: Path) -> Path:
    """Create the cache folder ``root`` (and missing parents, mode 0700) now, so that a file in its place or a
    folder that cannot be created is reported by the call that opened the cache, not at the first compile.

    An existing folder is left as it is, also when it cannot be written (a read-only copy of a cache still
    serves its entries; each failed write is a ``store_error`` event and one warning).

    Returns ``root``. Raises :class:`CacheFolderError` naming the path, the reason and what to do.
    """
    env = os.environ.get(ENV_CACHE_DIR)
    if env and Path(os.path.expanduser(env)) == Path(root):  # the folder came from the variable: say so
        what_to_do = f"it comes from ${ENV_CACHE_DIR}: set that to a folder you can create and write, or pass one"
    else:
        what_to_do = f"pass a folder you can create and write, or set {ENV_CACHE_DIR}"
    try:
        st = _fs.lstat(root)
    except OSError as exc:  # a name too long for the filesystem (ENAMETOOLONG), a looping path (ELOOP), EACCES
        raise CacheFolderError(f"cannot use cache folder {_shown_path(root)} ({exc.strerror or exc}); "
                               f"{what_to_do}") from exc
    if st is not None and not stat.S_ISDIR(st.st_mode):
        if stat.S_ISLNK(st.st_mode) and os.path.isdir(root):
            return root  # a link to a folder is how many home folders point at a larger disk
        raise CacheFolderError(f"cache folder {root} is a file, not a folder; {what_to_do}")
    try:
        _fs.ensure_dir(root)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CacheFolderError(f"cannot create cache folder {_shown_path(root)} ({reason}); {what_to_do}") from exc
    return root


def _shown_path(path: Path, limit: int = 200) -> str:
    """``path`` for a message, its middle cut past ``limit`` characters (a 4,000-character name stays one line)."""
    text = str(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-limit // 2:]} ({len(text)} characters)"


def file_stem(key: str) -> str:
    """File name stem for ``key``: characters outside [A-Za-z0-9_.-] become "_";
    keys over 150 characters become their first 80 + "-" + sha256(key)[:16].

    A leading "." also becomes "_" (hidden names are temp files). Raises ValueError for "".
    """
    if not key:
        raise ValueError("empty key")
    stem = _SAFE.sub("_", key)
    if len(stem) > _MAX_STEM:
        stem = stem[:80] + "-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if stem.startswith("."):
        stem = "_" + stem[1:]
    return stem


def validate_partition(name: str) -> str:
    """Return ``name`` if it is a usable partition folder name, else raise ValueError.

    Allowed: 1-200 characters of [A-Za-z0-9_.-], not starting with ".", not "quarantine".
    """
    if (
        not isinstance(name, str)
        or not name
        or len(name) > _MAX_PARTITION
        or _SAFE.search(name)
        or name.startswith(".")
        or name == QUARANTINE
    ):
        raise ValueError(
            f"invalid partition name {name!r}: use 1-{_MAX_PARTITION} characters of [A-Za-z0-9_.-], "
            f"not starting with '.', not {QUARANTINE!r}"
        )
    return name


def valid_partition(name: str) -> bool:
    """Whether ``name`` is a partition folder name this layout produces (see validate_partition)."""
    try:
        validate_partition(name)
        return True
    except ValueError:
        return False


# Environment.partition_name(): {platform}[-sm{cc}]-jaxlib{version}-{machine}-{cpu_level}-{digest[:8]}, or with the
# device kinds in place of the CPU level; every one holds a "-jaxlib" part (a user's "my-run-20240101" does not)
_ENV_PARTITION = re.compile(r"[a-z0-9]+-(?:[A-Za-z0-9_.-]+-)?jaxlib[A-Za-z0-9_.-]*-[0-9a-f]{8}", re.ASCII)
_MAX_INFO_BYTES = 1024 * 1024


def is_environment_partition(root: Path, name: str) -> bool:
    """Whether folder ``name`` of cache ``root`` is a partition xlakit made for an environment: its name has the
    shape of an environment's partition name (:meth:`xlakit._jax.environment.Environment.partition_name`, which
    always holds a ``-jaxlib<version>`` part and ends in 8 hex digits), or it holds a valid ``partition.json``
    (a plain file, not through a link, at most 1 MiB, holding a JSON object). A user's ``logs/`` or
    ``checkpoints/`` beside the entries is neither, so no listing counts it as another environment, and no
    eviction, verify, prune or clear ever removes, evicts or quarantines a file in it (see :mod:`.owned`)."""
    if not valid_partition(name):
        return False
    if _ENV_PARTITION.fullmatch(name):
        return True
    from . import safejson

    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd, _fs.dir_fd(name, at=rfd) as fd:
            return isinstance(safejson.load_file(PARTITION_INFO, _MAX_INFO_BYTES, at=fd), dict)
    except (OSError, ValueError):
        return False


def holds_only_store_names(root: Path, name: str) -> bool:
    """Whether folder ``name`` of cache ``root`` holds nothing but plain files at names the store writes
    (entries, ``.used``, temps, ``partition.json``). Shape only: a user's ``logs/`` holding nothing but a
    ``notes.xlk`` fits it, so it is never taken as proof that a folder is a partition (nothing is removed on it)."""
    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd, _fs.dir_fd(name, at=rfd) as fd:
            return _partition_shaped(fd) is None
    except OSError:
        return False


def temp_pid(name: str) -> int | None:
    """The writer's pid in a temp name ``.<name>.<pid>.<random>.tmp``, or None if the name has none."""
    m = _TEMP.match(name)
    return int(m.group(1)) if m else None


def is_temp_name(name: str) -> bool:
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (another user's counts; unknown = alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists (another user's), or not a pid we can ask about: assume alive
    return True


def is_stale_temp(name: str, st: os.stat_result, now: float | None = None, older_than_s: float = STALE_TEMP_S) -> bool:
    """True if the temp file ``name`` belongs to a writer that is gone: its pid (from the name) no longer
    exists on this machine, or it is older than ``older_than_s`` seconds. Only regular files qualify.
    """
    if not (is_temp_name(name) and stat.S_ISREG(st.st_mode)):
        return False
    now = time.time() if now is None else now
    if now - st.st_mtime > older_than_s:
        return True
    pid = temp_pid(name)
    return pid is not None and pid != os.getpid() and not pid_alive(pid)


def has_tag(root: Path) -> bool:
    """True if ``root/CACHEDIR.TAG`` is a regular file that starts with the standard's signature."""
    try:
        with _fs.open_regular(root / TAG_NAME) as f:
            return f.read(len(TAG_SIGNATURE)) == TAG_SIGNATURE
    except OSError:
        return False


def write_tag(root: Path) -> None:
    """Create ``root/CACHEDIR.TAG`` (create-only, never through a link). Raises OSError except "exists"."""
    try:
        fd = os.open(root / TAG_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(TAG_TEXT)


def _partition_shaped(fd: int) -> str | None:
    for d in _fs.scandir(fd):
        name = d.name
        if not d.is_file(follow_symlinks=False):
            return f"{name} is not a plain file"
        if not (name.endswith((ENTRY_SUFFIX, USED_SUFFIX)) or name == PARTITION_INFO or is_temp_name(name)):
            return f"{name} is not a name xlakit writes"
    return None


def _quarantine_shaped(fd: int) -> str | None:
    for d in _fs.scandir(fd):
        if not d.is_dir(follow_symlinks=False) or not (valid_partition(d.name) or d.name == UNKNOWN_PARTITION):
            return f"{QUARANTINE}/{d.name} is not a quarantine folder"
        with _fs.dir_fd(d.name, at=fd) as sub:
            for f in _fs.scandir(sub):
                if not f.is_file(follow_symlinks=False) or not f.name.endswith((ENTRY_SUFFIX, REASON_SUFFIX)):
                    return f"{QUARANTINE}/{d.name}/{f.name} is not a quarantined entry"
    return None


def is_xlakit_shaped(root: Path) -> str | None:
    """None if every name in ``root`` is one this layout produces (so it can be adopted as a cache);
    otherwise the first name that is not, as a short reason. Never follows a link.
    """
    try:
        with _fs.dir_fd(os.path.realpath(root)) as fd:
            for d in _fs.scandir(fd):
                name = d.name
                if name in (TAG_NAME, LOCK_NAME, BUNDLE_RECORD, FINGERPRINT_MEMO) or is_temp_name(name):
                    if not d.is_file(follow_symlinks=False):
                        return f"{name} is not a plain file"
                    continue
                if not d.is_dir(follow_symlinks=False):
                    return f"{name} is not a name xlakit writes"
                with _fs.dir_fd(name, at=fd) as sub:
                    why = _quarantine_shaped(sub) if name == QUARANTINE else (
                        _partition_shaped(sub) if valid_partition(name) else f"{name} is not a partition folder")
                if why:
                    return why
    except OSError as e:
        return f"cannot be read as a folder: {e}"
    return None


_MAGIC_STEM = b"XLAKIT\x00"  # the envelope's magic without its version byte (see envelope.py)


def _partition_proof(fd: int, name: str) -> str | None:
    """None if the partition folder (descriptor ``fd``) holds a partition.json that is a JSON object and at
    least one regular ``.xlk`` file starting with xlakit's magic bytes; else why not."""
    from . import safejson

    try:
        info = safejson.load_file(PARTITION_INFO, _MAX_INFO_BYTES, at=fd)
    except (OSError, ValueError):
        return f"{name}/ has no readable {PARTITION_INFO} written by xlakit"
    if not isinstance(info, dict):
        return f"{name}/{PARTITION_INFO} is not an xlakit partition description"
    for d in _fs.scandir(fd):
        if d.name.endswith(ENTRY_SUFFIX) and d.is_file(follow_symlinks=False):
            try:
                with _fs.open_regular(d.name, at=fd) as f:
                    if f.read(len(_MAGIC_STEM)) == _MAGIC_STEM:
                        return None
            except OSError:
                continue
    return f"{name}/ holds no xlakit entry"


def adoption_problem(root: Path) -> str | None:
    """None if ``root`` (without a tag) is provably an xlakit cache (rule in the module docstring), else
    why not. ``"empty"`` when it holds no partition folder at all. Never follows a link."""
    why = is_xlakit_shaped(root)
    if why is not None:
        return why
    try:
        with _fs.dir_fd(os.path.realpath(root)) as fd:
            parts = [d.name for d in _fs.scandir(fd) if d.name != QUARANTINE and d.is_dir(follow_symlinks=False)]
            if not parts:
                return "empty"
            for name in parts:
                with _fs.dir_fd(name, at=fd) as sub:
                    why = _partition_proof(sub, name)
                if why is not None:
                    return why
    except OSError as e:
        return f"cannot be read as a folder: {e}"
    return None


def require_cache_folder(root: Path) -> bool:
    """Check that ``root`` may be changed destructively; adopt a provable xlakit cache without a tag.

    Returns False when ``root`` does not exist or is an untagged folder with no partition (nothing to do;
    no tag is written), True when it is a cache folder (tagged now if it was not). Raises NotACacheFolder
    when it is not a folder, or is untagged and not provably xlakit's (see the module docstring); OSError
    if the tag cannot be written.
    """
    st = _fs.lstat(root)
    if st is None:
        return False
    if not stat.S_ISDIR(os.stat(root).st_mode if stat.S_ISLNK(st.st_mode) else st.st_mode):
        raise NotACacheFolder(root, "it is not a folder")
    if has_tag(root):
        return True
    why = adoption_problem(root)
    if why == "empty":
        return False
    if why is not None:
        raise NotACacheFolder(root, f"no {TAG_NAME}, and {why}")
    write_tag(root)
    return True
