"""Persistent storage of sealed cache entries (no JAX here).

- :mod:`.base`: the :class:`Store` contract (bytes by partition and key) and :class:`MemoryStore`.
- :mod:`.envelope`: the authenticated entry format (zstd, or as is when zstd does not halve it);
  :mod:`.safejson`: bounded JSON; :mod:`.split`: a payload returned in two parts (no copy of an executable).
- :mod:`.secret`: the HMAC secret (env or a private file outside the cache).
- :mod:`.entries`: entries over any Store (seal, open, expectations, quarantine): :class:`EntryLayer`.
- :mod:`.layout`, :mod:`.folder`, :mod:`.quarantine`, :mod:`.evict`: the local folder, its raw Store,
  quarantine and byte cap; :mod:`.owned`: which folders are partitions and which files their entries (nothing
  else is ever evicted, quarantined or cleared); :mod:`.verifying`: the local verify; :mod:`.local`:
  :class:`LocalStore`, which composes them.
- :mod:`.remote`: :class:`RemoteStore` (object storage through fsspec, create-only), :func:`verify_object`,
  :func:`remote_settings`; :mod:`.tiered`: :class:`TieredStore` (local in front of remote, failing open).
  Neither imports fsspec until a store is built.
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
    head_length,
    key_id,
    open_envelope,
    read_header,
    read_header_file,
    seal,
)
from .folder import FolderStore
from .layout import CacheFolderError, NotACacheFolder, prepare_root
from .local import (
    EntryInfo,
    GetResult,
    LocalStore,
    PutResult,
    file_stem,
    resolve_root,
    validate_partition,
)
from .remote import RemoteStore, remote_settings, verify_object
from .secret import SecretUnavailable, load_secret, secret_location
from .split import SplitPayload
from .tiered import TieredStore, TierEvent

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "CacheFolderError",
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
    "RemoteStore",
    "SecretUnavailable",
    "SplitPayload",
    "StaleEntry",
    "Store",
    "TierEvent",
    "TieredStore",
    "UnauthenticatedEntry",
    "decompress_bounded",
    "file_stem",
    "head_length",
    "key_id",
    "load_secret",
    "open_envelope",
    "read_header",
    "read_header_file",
    "prepare_root",
    "remote_settings",
    "resolve_root",
    "seal",
    "secret_location",
    "validate_partition",
    "verify_object",
]
