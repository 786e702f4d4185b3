"""Persistent storage of sealed cache entries (no JAX here).

- :mod:`.envelope`: the authenticated, compressed entry format.
- :mod:`.secret`: the HMAC secret (env or a private file).
- :mod:`.local`: :class:`LocalStore`, a folder of entries with LRU eviction.
"""

from .envelope import (
    FORMAT_VERSION,
    MAGIC,
    CorruptEntry,
    EntryError,
    UnauthenticatedEntry,
    open_envelope,
    read_header,
    read_header_file,
    seal,
)
from .local import EntryInfo, GetResult, LocalStore, PutResult, file_stem, resolve_root, validate_partition
from .secret import SecretUnavailable, load_secret, secret_location

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "CorruptEntry",
    "EntryError",
    "EntryInfo",
    "GetResult",
    "LocalStore",
    "PutResult",
    "SecretUnavailable",
    "UnauthenticatedEntry",
    "file_stem",
    "load_secret",
    "open_envelope",
    "read_header",
    "read_header_file",
    "resolve_root",
    "seal",
    "secret_location",
    "validate_partition",
]
