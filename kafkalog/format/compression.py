"""Kafka's five record compression codecs, byte-compatible with the Java client (spec §2).

A codec turns the records section of a v2 batch (or the value of a v0/v1 wrapper record) into the
bytes Kafka stores, and back:

* ``gzip``   RFC 1952, one member, header ``1f 8b 08 00 00000000 00 ff`` as JDK >= 16 writes it.
* ``snappy`` xerial framing: ``82 'SNAPPY' 00``, int32 BE version 1, int32 BE compatible version 1,
  then chunks of int32 BE length + raw snappy block of <= 32 KiB input. Readers also accept one bare
  raw snappy block, as snappy-java does (non-Java producers write those).
* ``lz4``    LZ4 frame ``04 22 4D 18 | FLG 60 | BD 40 | HC``; blocks of uint32 LE size (high bit set
  = stored) + data, <= 64 KiB input each, end mark ``00000000``, no checksums. Magic 0 computes HC
  over magic+FLG+BD (Kafka 0.8's bug) and its readers skip the HC check.
* ``zstd``   standard frames without pledged content size; magic 2 only.

Readers accept what Kafka's readers accept; every failure raises :class:`CompressionError`.
"""

from __future__ import annotations

import enum
import functools
import struct
import zlib

import cramjam

from kafkalog.errors import CompressionError

__all__ = ["CompressionType", "compress", "decompress"]

Bytes = bytes | bytearray | memoryview


class CompressionType(enum.IntEnum):
    """Codec id, as stored in bits 0-2 of the batch (or wrapper record) attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def name_kafka(self) -> str:
        """The name Kafka uses in configs and kafka-dump-log's ``compresscodec:``."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        try:
            return cls[name.upper()]
        except KeyError:
            choices = ", ".join(c.name_kafka for c in cls)
            raise CompressionError(f"unknown compression type {name!r}; expected one of {choices}") from None


# Kafka's defaults and accepted ranges (compression.<codec>.level), checked at this boundary.
_LEVELS = {
    CompressionType.GZIP: (-1, -1, 9),  # -1 = zlib's default (6); 0 is rejected by Kafka
    CompressionType.LZ4: (9, 1, 17),
    CompressionType.ZSTD: (3, -131072, 22),
}


def compress(codec: CompressionType | int, data: Bytes, level: int | None = None, *, magic: int = 2) -> bytes:
    """Compress ``data`` as Kafka's producer does for ``codec`` (``level=None`` = Kafka's default)."""
    ctype = _check(codec, magic)
    view = memoryview(data).cast("B")
    if ctype not in _LEVELS:
        if level is not None:
            raise CompressionError(f"{ctype.name_kafka} has no compression level (got {level})")
        return bytes(view) if ctype is CompressionType.NONE else _snappy_encode(view)
    default, lowest, highest = _LEVELS[ctype]
    if level is None:
        level = default
    elif not (lowest <= level <= highest) or (ctype is CompressionType.GZIP and level == 0):
        raise CompressionError(
            f"compression.{ctype.name_kafka}.level {level} is out of range {lowest}..{highest}"
        )
    if ctype is CompressionType.GZIP:
        return _gzip_encode(view, level)
    if ctype is CompressionType.LZ4:
        return _lz4_encode(view, level, magic)
    compressor = cramjam.zstd.Compressor(level=level)  # streaming: no content size, like zstd-jni
    compressor.compress(_as_bytes(data))
    return bytes(compressor.finish())


def decompress(codec: CompressionType | int, data: Bytes, *, magic: int = 2) -> bytes:
    """Decompress a payload written with ``codec`` by any conforming writer."""
    return b"".join(decompress_parts(codec, data, magic=magic))  # one part of exact bytes: no copy


def decompress_parts(codec: CompressionType | int, data: Bytes, *, magic: int = 2) -> list[Bytes]:
    """:func:`decompress`, as pieces whose concatenation is the payload (same checks, same errors).

    For callers that copy the payload somewhere anyway (the bulk scan's arena): the pieces are the
    decoders' own buffers, so the payload is not first copied into one ``bytes``. A piece may be a
    view of ``data`` (codec none) and may be writable; it must not be modified.
    """
    ctype = _check(codec, magic)
    view = memoryview(data).cast("B")
    try:
        if ctype is CompressionType.NONE:
            return [view]
        if ctype is CompressionType.GZIP:
            return _gzip_decode(view)
        if ctype is CompressionType.SNAPPY:
            return _snappy_decode(view)
        if ctype is CompressionType.LZ4:
            return [_lz4_decode(view, magic)]
        return [memoryview(cramjam.zstd.decompress(view))]
    except (cramjam.DecompressionError, zlib.error) as exc:
        raise CompressionError(f"corrupt {ctype.name_kafka} data ({len(view)} bytes): {exc}") from exc


def _check(codec: CompressionType | int, magic: int) -> CompressionType:
    try:
        ctype = CompressionType(codec)
    except ValueError:
        raise CompressionError(f"unknown compression codec id {codec}; valid ids are 0..4") from None
    if magic not in (0, 1, 2):
        raise CompressionError(f"unknown record format magic {magic}; expected 0, 1 or 2")
    if ctype is CompressionType.ZSTD and magic < 2:
        raise CompressionError(f"zstd requires record format magic 2, got magic {magic}")
    return ctype


def _as_bytes(data: Bytes) -> bytes:
    # cramjam's streaming compressors accept only bytes, whatever their stubs say.
    return data if isinstance(data, bytes) else bytes(data)


# --- gzip -------------------------------------------------------------------------------------------

# GZIPOutputStream's header: no name, mtime 0, XFL 0, OS 0xFF ("unknown", JDK >= 16).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_GZIP_TRAILER = struct.Struct("<II")  # CRC-32 and input size mod 2**32


def _gzip_encode(data: memoryview, level: int) -> bytes:
    # Raw deflate plus our own header/trailer gives the JDK's exact header bytes.
    body = zlib.compress(data, level, wbits=-15)
    return _GZIP_HEADER + body + _GZIP_TRAILER.pack(zlib.crc32(data), len(data) & 0xFFFFFFFF)


def _gzip_decode(data: memoryview) -> list[Bytes]:
    parts: list[Bytes] = []
    rest: Bytes = data
    while True:
        inflater = zlib.decompressobj(wbits=31)
        parts.append(inflater.decompress(rest))
        if not inflater.eof:
            raise CompressionError(f"gzip data ({len(data)} bytes) is truncated: the member has no trailer")
        rest = inflater.unused_data
        # GZIPInputStream reads concatenated members and silently ignores anything else after one.
        if rest[:3] != b"\x1f\x8b\x08":
            return parts


# --- snappy -----------------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible version 1
_XERIAL_CHUNK = 32768  # SnappyOutputStream's default block size
_I32BE = struct.Struct(">i")


def _snappy_encode(data: memoryview) -> bytes:
    out = bytearray(_XERIAL_HEADER)  # snappy-java writes the header even for empty input
    for start in range(0, len(data), _XERIAL_CHUNK):
        block = cramjam.snappy.compress_raw(data[start : start + _XERIAL_CHUNK])
        out += _I32BE.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decode(data: memoryview) -> list[Bytes]:
    # snappy-java checks the whole 8-byte magic, not just 0x82: a raw block whose length varint
    # starts with 0x82 (1 in 128 raw payloads of >= 128 bytes) must still take the raw path.
    if len(data) < len(_XERIAL_HEADER) or data[:8] != _XERIAL_MAGIC:
        return [memoryview(cramjam.snappy.decompress_raw(data))]
    parts: list[Bytes] = []
    pos = len(_XERIAL_HEADER)
    # snappy-java stops quietly when fewer than 4 bytes remain for a chunk length.
    while pos + 4 <= len(data):
        if data[pos : pos + 8] == _XERIAL_MAGIC:  # concatenated streams repeat the header
            pos += len(_XERIAL_HEADER)
            continue
        (size,) = _I32BE.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CompressionError(
                f"snappy chunk at byte {pos - 4} claims {size} bytes but {len(data) - pos} remain"
            )
        parts.append(memoryview(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return parts


# --- lz4 --------------------------------------------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG, _LZ4_BD = 0x60, 0x40  # version 01 + independent blocks; 64 KiB max block
_LZ4_BLOCK = 65536
_LZ4_STORED = 0x80000000  # block-size bit: the block holds raw bytes
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_U32LE = struct.Struct("<I")
_FLG_BLOCK_CHECKSUM, _FLG_CONTENT_SIZE, _FLG_CONTENT_CHECKSUM = 0x10, 0x08, 0x04

_XXH_P1, _XXH_P2, _XXH_P3, _XXH_P4, _XXH_P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32(data: bytes) -> int:
    """xxHash32 with seed 0 of a frame descriptor (at most 10 bytes here, so plain Python is fine).

    Only xxHash's path for inputs under 16 bytes is needed; longer inputs are refused, not hashed wrong.
    """
    if len(data) >= 16:
        raise ValueError(f"_xxh32 handles descriptors under 16 bytes, got {len(data)}")
    h = (_XXH_P5 + len(data)) & _M32
    pos = 0
    while pos + 4 <= len(data):
        h = _rotl32((h + int.from_bytes(data[pos : pos + 4], "little") * _XXH_P3) & _M32, 17) * _XXH_P4 & _M32
        pos += 4
    for byte in data[pos:]:
        h = _rotl32((h + byte * _XXH_P5) & _M32, 11) * _XXH_P1 & _M32
    h = (h ^ (h >> 15)) * _XXH_P2 & _M32
    h = (h ^ (h >> 13)) * _XXH_P3 & _M32
    return h ^ (h >> 16)


@functools.lru_cache(maxsize=256)
def _lz4_hc(descriptor: bytes) -> int:
    """Header checksum byte; cached because nearly every frame has the same descriptor."""
    return (_xxh32(descriptor) >> 8) & 0xFF


_LZ4_HEADER = _LZ4_MAGIC + bytes((_LZ4_FLG, _LZ4_BD, _lz4_hc(bytes((_LZ4_FLG, _LZ4_BD)))))
_LZ4_HEADER_V0 = _LZ4_HEADER[:6] + bytes((_lz4_hc(_LZ4_HEADER[:6]),))  # "broken" HC over magic too
LZ4_FRAME_HEADER = _LZ4_HEADER  # what compress_into starts a magic-2 lz4 frame with
LZ4_BLOCK_BYTES = _LZ4_BLOCK  # and the largest block it writes


def lz4_plain_header_checksums() -> tuple[int, ...]:
    """The HC byte of a plain frame header, ``04 22 4D 18 | FLG 60 | BD | HC``, for each BD block-size code.

    Index: ``BD >> 4`` (0..7); -1 for the codes below 4, which are invalid. FLG ``60`` is the one Kafka
    writes: version 1, independent blocks, no checksums, no content size. After such a header a frame
    holds only ``uint32 LE size | data`` blocks (size high bit set = stored, at most ``1 << (2 * code + 8)``
    bytes) up to a zero end mark, so a reader that walks the frame itself (the bulk scan lists the blocks
    of a whole segment in compiled code) may do so for exactly this header and must leave any other frame
    to :func:`decompress`, which also produces the errors.
    """
    return tuple(_lz4_hc(bytes((_LZ4_FLG, code << 4))) if code >= 4 else -1 for code in range(8))


def _lz4_encode(data: memoryview, level: int, magic: int) -> bytes:
    header = _LZ4_HEADER_V0 if magic == 0 else _LZ4_HEADER
    if level != 9:
        return _lz4_encode_hc(data, level, header)
    # Kafka's default level uses lz4-java's fast compressor. cramjam's block compressor yields the
    # bytes behind Kafka's own LZ4 checksum vectors (see the tests); python-lz4's does not.
    out = bytearray(header)
    for start in range(0, len(data), _LZ4_BLOCK):
        chunk = data[start : start + _LZ4_BLOCK]
        block = cramjam.lz4.compress_block(chunk, store_size=False)
        if len(block) >= len(chunk):  # incompressible: store raw, as Lz4BlockOutputStream does
            out += _U32LE.pack(len(chunk) | _LZ4_STORED)
            out += chunk
        else:
            out += _U32LE.pack(len(block))
            out += block
    out += _LZ4_END_MARK
    return bytes(out)


def compress_bound(size: int) -> int:
    """Room enough for any codec's output of ``size`` bytes (snappy's worst case is the largest)."""
    return size + size // 6 + 64


def compress_into(codec: CompressionType, data: memoryview, out: memoryview) -> int:
    """``compress(codec, data)`` (Kafka's default level, magic 2) written into ``out``, which has
    ``compress_bound(len(data))`` bytes of room; returns the bytes written. Kafka's default lz4 is
    compressed block by block straight into ``out`` (the cleaner recompresses every rebuilt batch:
    no intermediate ``bytes`` per batch); other codecs are compressed, then copied."""
    if codec is not CompressionType.LZ4:
        packed = compress(codec, data)
        out[:len(packed)] = packed
        return len(packed)
    out[:len(_LZ4_HEADER)] = _LZ4_HEADER
    q = len(_LZ4_HEADER)
    for start in range(0, len(data), _LZ4_BLOCK):
        chunk = data[start:start + _LZ4_BLOCK]
        written = cramjam.lz4.compress_block_into(chunk, out[q + 4:], store_size=False)
        if written >= len(chunk):  # incompressible: stored raw, as in _lz4_encode
            _U32LE.pack_into(out, q, len(chunk) | _LZ4_STORED)
            out[q + 4:q + 4 + len(chunk)] = chunk
            q += 4 + len(chunk)
        else:
            _U32LE.pack_into(out, q, written)
            q += 4 + written
    out[q:q + 4] = _LZ4_END_MARK
    return q + 4


def _lz4_encode_hc(data: memoryview, level: int, header: bytes) -> bytes:
    # cramjam 2.14's compress_block ignores mode/compression, so HC goes through liblz4's frame
    # API, which always adds block checksums; keep its blocks, drop the checksums and the header.
    # (liblz4's frame API runs levels 1-2 with its fast compressor; lz4-java would use HC.)
    compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
    compressor.compress(_as_bytes(data))
    frame = bytes(compressor.finish())
    flg = frame[4]
    pos = 7 + (8 if flg & _FLG_CONTENT_SIZE else 0)
    checksum = 4 if flg & _FLG_BLOCK_CHECKSUM else 0
    out = bytearray(header)
    while (word := _U32LE.unpack_from(frame, pos)[0]) != 0:
        end = pos + 4 + (word & ~_LZ4_STORED)
        out += frame[pos:end]
        pos = end + checksum
    out += _LZ4_END_MARK
    return bytes(out)


def _lz4_decode(frame: memoryview, magic: int) -> bytearray:
    size = len(frame)
    if frame[:4] != _LZ4_MAGIC:
        raise CompressionError(
            f"lz4 frame ({size} bytes) starts with {bytes(frame[:4]).hex()!r}, expected 04224d18"
        )
    if size < 7:
        raise CompressionError(f"lz4 frame of {size} bytes is truncated inside its header")
    flg, bd = frame[4], frame[5]
    if flg >> 6 != 1 or flg & 0x03:
        raise CompressionError(f"lz4 FLG byte 0x{flg:02x} has version != 1 or reserved bits set")
    if not flg & 0x20:
        raise CompressionError("lz4 frame uses dependent blocks; Kafka requires block independence")
    if bd & 0x8F or (bd >> 4) < 4:
        raise CompressionError(f"lz4 BD byte 0x{bd:02x} is invalid (size code must be 4..7)")
    hc_pos = 6 + (8 if flg & _FLG_CONTENT_SIZE else 0)  # Kafka skips the content size unread
    if hc_pos >= size:
        raise CompressionError(f"lz4 frame of {size} bytes is truncated inside its header")
    if magic >= 1 and frame[hc_pos] != _lz4_hc(bytes(frame[4:hc_pos])):
        raise CompressionError(
            f"lz4 header checksum 0x{frame[hc_pos]:02x} != 0x{_lz4_hc(bytes(frame[4:hc_pos])):02x}"
        )
    max_block = 1 << (2 * (bd >> 4) + 8)
    checksum = 4 if flg & _FLG_BLOCK_CHECKSUM else 0
    out = bytearray()
    scratch: bytearray | None = None
    pos = hc_pos + 1
    while True:
        if pos + 4 > size:
            raise CompressionError(f"lz4 frame of {size} bytes is truncated: no end mark")
        (word,) = _U32LE.unpack_from(frame, pos)
        pos += 4
        if word == 0:
            break
        end = pos + (word & ~_LZ4_STORED)
        if end - pos > max_block:
            raise CompressionError(f"lz4 block at byte {pos - 4} has {end - pos} bytes > max {max_block}")
        if end + checksum > size:
            raise CompressionError(f"lz4 block at byte {pos - 4} is truncated ({size - pos} bytes left)")
        if word & _LZ4_STORED:
            out += frame[pos:end]
        else:
            if scratch is None:  # one buffer per frame: liblz4 needs room for a whole block
                scratch = bytearray(max_block)
            produced = cramjam.lz4.decompress_block_into(frame[pos:end], scratch)
            out += memoryview(scratch)[:produced]
        pos = end + checksum
    if flg & _FLG_CONTENT_CHECKSUM:
        pos += 4
        if pos > size:
            raise CompressionError(f"lz4 frame of {size} bytes is truncated inside its content checksum")
    if flg & (_FLG_BLOCK_CHECKSUM | _FLG_CONTENT_CHECKSUM):
        _lz4_verify_checksums(frame, hc_pos, pos)
    return out  # like Kafka, bytes after the end mark are never read


def _lz4_verify_checksums(frame: memoryview, hc_pos: int, end: int) -> None:
    # Kafka never writes checksums, so frames with them are rare: let liblz4 verify them instead of
    # hashing in Python. The descriptor is rebuilt without content size, so only checksums count.
    descriptor = bytes((frame[4] & ~_FLG_CONTENT_SIZE, frame[5]))
    rebuilt = _LZ4_MAGIC + descriptor + bytes((_lz4_hc(descriptor),)) + frame[hc_pos + 1 : end]
    try:
        cramjam.lz4.decompress(rebuilt)
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"lz4 frame fails its checksum: {exc}") from exc
