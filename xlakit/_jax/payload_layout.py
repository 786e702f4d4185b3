"""The byte layout of an executable payload (:func:`xlakit._jax.serialize.serialize_compiled`): the pickle frame
apart from the XLA executable it refers to.

JAX's own format (``jax.experimental.serialize_executable``) is one pickle holding the serialized executable
inline, as the persistent id ``('exec', <bytes>)``. Every reader of such a payload — the policy scan, then the
restricted unpickler — copies those bytes (a pickle ``BINBYTES`` is read into a new object), and the scan walks
them only to throw them away: two copies of the executable (tens of MB for a large program) before XLA sees it.
xlakit writes the executable after the pickle instead::

    offset  size  field
    0       8     magic b"XLKJAX\\x00\\x01"
    8       8     F = the frame's length, big-endian uint64
    16      F     frame: JAX's pickle, the executable's persistent id being ('exec', <its length in bytes>)
    16+F    ...   the executable bytes (XLA's ``serialize_executable``), to the end

so the scan and the unpickler read only the frame (kilobytes) and the executable is copied at most once, into the
``bytes`` XLA's ``deserialize_executable`` takes — and not at all when a store hands the payload over as a
:class:`~xlakit.store.split.SplitPayload` cut where the executable starts (:func:`tail_offset`, recorded as the
entry's ``payload_split``): its tail is then those very bytes. Payloads in JAX's own format (entries written
before this layout) are still read: :func:`split` returns them whole, as the frame.
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

from xlakit.store.split import SplitPayload

__all__ = ["MAGIC", "NotOneExecutable", "dump", "join", "split", "tail_offset"]

MAGIC = b"XLKJAX\x00\x01"  # never the start of a pickle (protocol 2+ opens with 0x80)
_LENGTH = struct.Struct(">Q")
_HEAD = len(MAGIC) + _LENGTH.size


class NotOneExecutable(ValueError):
    """The pickled objects hold no XLA executable, or more than one (a payload holds exactly one)."""


def dump(obj: Any) -> bytes:
    """The payload of ``obj`` (objects holding one XLA executable): pickled with JAX's ``_JaxPjrtPickler``, whose
    persistent ids stand for executables, devices and the client, the executable's bytes kept out of the frame.
    Raises :class:`NotOneExecutable`, and whatever pickling ``obj`` raises."""
    from jax.experimental.serialize_executable import _JaxPjrtPickler

    executables: list[bytes] = []

    class FramePickler(_JaxPjrtPickler):
        def persistent_id(self, o):
            pid = super().persistent_id(o)
            if pid is not None and pid[0] == "exec":
                executables.append(pid[1])
                return ("exec", len(pid[1]))
            return pid

    with io.BytesIO() as f:
        FramePickler(f).dump(obj)
        frame = f.getvalue()
    if len(executables) != 1:
        raise NotOneExecutable(f"expected one XLA executable in the payload, found {len(executables)}")
    return join(frame, executables[0])


def join(frame: bytes, executable: bytes) -> bytes:
    """The payload of ``frame`` (a pickle whose executable is ``('exec', len(executable))``) and ``executable``."""
    return b"".join((MAGIC, _LENGTH.pack(len(frame)), frame, executable))


def tail_offset(payload: bytes | memoryview) -> int | None:
    """Where the executable starts in a payload of this layout (16 + the frame's length), in bytes; None for a
    payload in JAX's own format or one too short to hold its frame."""
    view = memoryview(payload)
    if len(view) < _HEAD or bytes(view[: len(MAGIC)]) != MAGIC:
        return None
    (n,) = _LENGTH.unpack_from(view, len(MAGIC))
    return _HEAD + n if n <= len(view) - _HEAD else None


def split(payload: bytes | memoryview | SplitPayload) -> tuple[bytes, bytes | memoryview | None]:
    """``(frame, executable)``: the pickle frame as ``bytes`` and the executable bytes with no copy — a view of
    them, or, for a :class:`~xlakit.store.split.SplitPayload` cut where they start, its ``tail`` itself; for a
    payload in JAX's own format, ``(payload, None)`` (its executable is inside the pickle). Raises
    ``pickle.UnpicklingError`` for a layout whose frame length does not fit the payload."""
    if isinstance(payload, SplitPayload):
        if tail_offset(payload.head) == len(payload.head):  # the head is exactly magic, length and frame
            return bytes(memoryview(payload.head)[_HEAD:]), payload.tail
        payload = bytes(payload)  # cut elsewhere (not by this layout): as one object
    view = memoryview(payload)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        return (payload if isinstance(payload, bytes) else bytes(view)), None
    if len(view) < _HEAD:
        raise pickle.UnpicklingError(f"truncated payload: {len(view)} bytes, shorter than its {_HEAD}-byte head")
    (n,) = _LENGTH.unpack_from(view, len(MAGIC))
    if n > len(view) - _HEAD:
        raise pickle.UnpicklingError(f"payload frame of {n} bytes does not fit the {len(view)}-byte payload")
    return bytes(view[_HEAD : _HEAD + n]), view[_HEAD + n :]
