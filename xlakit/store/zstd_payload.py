"""Decompressing an entry's zstd payload (authenticated bytes only), bounded: exactly one zstd frame, found by its
block headers; never more bytes than the header names; a size no memory holds is a corrupt entry, not an exception;
a payload with a cut (``payload_split``) is decompressed straight into its two parts.
"""

from __future__ import annotations

import zstandard

from .entry_errors import CorruptEntry

__all__ = ["zstd_frame_length", "decompress_bounded", "decompress_in_two"]


#: Bytes read at a time from a frame that does not declare its decompressed size (xlakit always writes the size):
#: what is allocated then follows what the frame holds, never a size a header names.
_PIECE_BYTES = 16 << 20
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # RFC 8878, section 3.1.1: 0xFD2FB528, little-endian


def zstd_frame_length(data: bytes | memoryview) -> int:
    """Length in bytes of the zstd frame that starts ``data`` — its header, its blocks and its checksum — read from
    the block headers (RFC 8878, section 3.1.1: 3 bytes each, last-block flag, type, size; an RLE block's content
    is one byte). Raises CorruptEntry for data that is no zstd frame, or a truncated one."""
    view = memoryview(data).cast("B")
    if bytes(view[:4]) != _ZSTD_MAGIC:  # frame_header_size() does not look at the magic number
        raise CorruptEntry("zstd decompression failed: the payload does not start with a zstd frame")
    try:
        pos = zstandard.frame_header_size(view)
    except zstandard.ZstdError as e:
        raise CorruptEntry(f"zstd decompression failed: {e}") from None
    checksum = 4 if len(view) > 4 and view[4] & 0x04 else 0  # Frame_Header_Descriptor: Content_Checksum_flag
    while True:
        if pos + 3 > len(view):
            raise CorruptEntry("truncated zstd frame")
        block = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        kind = block >> 1 & 3
        if kind == 3:
            raise CorruptEntry("zstd frame with a block of the reserved type")
        pos += 3 + (1 if kind == 1 else block >> 3)
        if block & 1:  # the last block
            break
    pos += checksum
    if pos > len(view):
        raise CorruptEntry("truncated zstd frame")
    return pos


def decompress_bounded(data: bytes | memoryview, max_bytes: int) -> bytes:
    """zstd-decompress ``data`` (any bytes-like object), which must be exactly one zstd frame, into at most
    ``max_bytes`` bytes.

    The frame's declared content size is checked first (it would override ``max_output_size``); a frame
    without one is read in pieces and stopped at the bound. Raises CorruptEntry if the data is not one zstd frame
    (bytes after it included), would decompress to more than ``max_bytes``, or cannot be held in memory. Call it
    only on authenticated bytes.
    """
    (whole,) = _decompress(data, max_bytes, None)
    return whole


def decompress_in_two(data: bytes | memoryview, max_bytes: int, split: int) -> tuple[bytes, bytes]:
    """:func:`decompress_bounded` as two ``bytes`` objects, its first ``split`` bytes and the rest, each written
    by the decompressor into its own object: cutting one decompressed object would copy the rest (as long as
    decompressing it: 0.04 s per 64 MiB)."""
    head, tail = _decompress(data, max_bytes, split)
    return head, tail


def _decompress(data: bytes | memoryview, max_bytes: int, split: int | None) -> tuple[bytes, ...]:
    """``(raw,)``, or ``(head, tail)`` cut at ``split``; the two readers above share every check."""
    length = zstd_frame_length(data)
    if length != len(data):  # one payload, one meaning: what follows the frame would be left unread
        raise CorruptEntry(f"the payload is not one zstd frame: {len(data) - length} bytes follow it")
    declared: int | str = "an undeclared number of"
    try:
        declared = size = zstandard.frame_content_size(data)
        if size > max_bytes:
            raise CorruptEntry(f"zstd frame declares {size} bytes, over the {max_bytes}-byte bound")
        decompressor = zstandard.ZstdDecompressor()
        if size >= 0 and split is None:
            parts: tuple[bytes, ...] = (decompressor.decompress(data, max_output_size=max_bytes),)
        elif size >= 0 and split is not None:  # each part's object allocated once, at the size the frame declares
            reader = decompressor.stream_reader(data)
            head = _read_up_to(reader, min(split, size))
            parts = (head, _read_up_to(reader, size - len(head) + 1))
        else:  # no declared size: read in pieces, joined (a copy; xlakit writes none such)
            whole = _read_pieces(decompressor.stream_reader(data), max_bytes)
            parts = (whole,) if split is None else (whole[:split], whole[split:])
    except zstandard.ZstdError as e:
        raise CorruptEntry(f"zstd decompression failed: {e}") from None
    except (OverflowError, MemoryError) as e:  # a declared size no memory holds (only a holder of the secret)
        raise CorruptEntry(f"zstd frame of {declared} bytes cannot be decompressed in memory: "
                           f"{type(e).__name__}") from None
    if sum(len(p) for p in parts) > max_bytes:
        raise CorruptEntry(f"zstd data decompresses to more than the {max_bytes}-byte bound")
    return parts


def _read_pieces(reader: zstandard.ZstdDecompressionReader, max_bytes: int) -> bytes:
    """All of ``reader`` in pieces of at most :data:`_PIECE_BYTES`, stopped once past ``max_bytes``."""
    pieces, total = [], 0
    while total <= max_bytes:
        piece = reader.read(min(_PIECE_BYTES, max_bytes + 1 - total))
        if not piece:
            break
        pieces.append(piece)
        total += len(piece)
    return b"".join(pieces)


def _read_up_to(reader: zstandard.ZstdDecompressionReader, size: int) -> bytes:
    """``size`` bytes from ``reader``, fewer only at the end of its data: one read, which fills its object (a
    reader that stops short is read on, joining what came: a copy that one read never needs)."""
    out = reader.read(size)
    while len(out) < size:
        more = reader.read(size - len(out))
        if not more:
            break
        out += more
    return out
