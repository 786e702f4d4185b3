"""A payload held in two parts, so that its large part reaches its reader with no copy: :class:`SplitPayload`.

Python copies whenever it slices ``bytes``, and XLA's ``Client.deserialize_executable`` takes nothing but ``bytes``.
An executable payload (:mod:`xlakit._jax.payload_layout`) is a pickle frame of kilobytes followed by the XLA
executable (68 MB for issue 33's TPU train step): handed over as one ``bytes`` object, the executable must be copied
out of it once more before XLA sees it — as long as reading the file, on the reference machine (0.038 s per 64 MiB,
mostly the page faults of fresh memory). An entry sealed with the header field ``payload_split``
(:mod:`xlakit.store.envelope`) is instead read in two parts, cut where the executable starts, and opened as a
:class:`SplitPayload` whose ``tail`` is the very ``bytes`` object the file was read into.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["SplitPayload", "from_parts"]


class SplitPayload:
    """A payload as ``head`` (its first bytes) and ``tail`` (the rest), each its own ``bytes`` object.

    It stands for ``head + tail`` where a payload is used as a value: ``len(p)`` is the payload's length in bytes,
    ``bytes(p)`` joins the parts (a copy: what a caller that needs one object pays), and it compares equal to a
    bytes-like object or another SplitPayload holding the same bytes, wherever each is cut. Readers that know the
    layout (:func:`xlakit._jax.payload_layout.split`) take ``tail`` as it is.
    """

    __slots__ = ("head", "tail")

    def __init__(self, head: bytes, tail: bytes) -> None:
        if not isinstance(head, bytes) or not isinstance(tail, bytes):
            raise TypeError(f"SplitPayload parts must be bytes, got {type(head).__name__} and {type(tail).__name__}")
        self.head = head
        self.tail = tail

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

    def __bytes__(self) -> bytes:
        return self.head + self.tail

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SplitPayload):
            other = bytes(other) if len(other) == len(self) else b""
        if not isinstance(other, (bytes, bytearray, memoryview)):
            return NotImplemented
        view, n = memoryview(other).cast("B"), len(self.head)
        return len(view) == len(self) and view[:n] == self.head and view[n:] == self.tail

    __hash__ = None  # type: ignore[assignment]  # compares equal to bytes with another hash

    def __repr__(self) -> str:
        return f"SplitPayload({len(self.head)} + {len(self.tail)} bytes)"


def from_parts(parts: Sequence[bytes | bytearray | memoryview], split: int | None) -> bytes | SplitPayload:
    """A payload from the parts it was read or decompressed in (in order): a :class:`SplitPayload` cut at ``split``
    (an offset within it), or ``bytes`` when ``split`` is None. A part that already is what the caller gets is
    returned as it is: two ``bytes`` parts cut at ``split`` make a SplitPayload with no copy at all."""
    if split is None:
        return parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)
    head, tail = parts[0], parts[-1]
    if len(parts) == 2 and len(head) == split and isinstance(head, bytes) and isinstance(tail, bytes):
        return SplitPayload(head, tail)
    whole = memoryview(parts[0] if len(parts) == 1 else b"".join(parts))
    return SplitPayload(bytes(whole[:split]), bytes(whole[split:]))
