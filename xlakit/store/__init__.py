"""Persistent storage of sealed cache entries (no JAX here).

- :mod:`.base`: the :class:`Store` contract (bytes by partition and key) and :class:`MemoryStore`.
- :mod:`.envelope`: the authenticated, compressed entry format; :mod:`.safejson`: bounded JSON.
- :mod:`.secret`: the HMAC secret (env or a private file outside the cache).
- :mod:`.entries`: entries over any Store (seal, open, expectations, quarantine): :class:`EntryLayer`.
- :mod:`.layout`, :mod:`.folder`, :mod:`.quarantine`, :mod:`.evict`: the local folder, its raw Store,
  quarantine and byte cap; :mod:`.local`: :class:`LocalStore`, which composes them.
"""

from .base import MemoryStore, ObjectRefused, ObjectStat, Store
from .entries import EntryLayer
from .envelope import (
    FORMAT_VERSION,
    MAGIC,
    CorruptEntry,
    EntryError,
    ForeignKeyEntry,
    StaleEntry,
    UnauthenticatedEntry,
    decompress_bounded,
    key_id,
    open_envelope,
    read_header,
    read_header_file,
    seal,
)
from .folder import FolderStore
from .layout import NotACacheFolder
from .local import (
    EntryInfo,
    GetResult,
    LocalStore,
    PutResult,
    file_stem,
    resolve_root,
    validate_partition,
)
from .secret import SecretUnavailable, load_secret, secret_location

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "CorruptEntry",
    "EntryError",
    "EntryInfo",
    "EntryLayer",
    "FolderStore",
    "ForeignKeyEntry",
    "GetResult",
    "LocalStore",
    "MemoryStore",
    "NotACacheFolder",
    "ObjectRefused",
    "ObjectStat",
    "PutResult",
    "SecretUnavailable",
    "StaleEntry",
    "Store",
    "UnauthenticatedEntry",
    "decompress_bounded",
    "file_stem",
    "key_id",
    "load_secret",
    "open_envelope",
    "read_header",
    "read_header_file",
    "resolve_root",
    "seal",
    "secret_location",
    "validate_partition",
]
