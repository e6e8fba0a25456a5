"""Tests for kafkalog.format.compression: round trips, exact framing bytes, Kafka's own checksum
vectors, interop with independent implementations (kafka-python's codecs, python-lz4, zstandard,
python-snappy) and the error contract (only CompressionError ever escapes)."""

from __future__ import annotations

import random
import struct
import zlib

import crc32c
import lz4.block
import lz4.frame
import pytest
import snappy
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from kafkalog.errors import CompressionError
from kafkalog.format.compression import CompressionType, compress, compress_bound, compress_into, decompress

C = CompressionType
ALL = list(CompressionType)
LZ4_HEADER = bytes.fromhex("04224d18604082")
LZ4_HEADER_V0 = bytes.fromhex("04224d1860401a")
XERIAL_HEADER = bytes.fromhex("82534e41505059000000000100000001")  # magic, version 1, compat 1
END_MARK = b"\x00\x00\x00\x00"


def _text(size: int, seed: int = 7) -> bytes:
    """Compressible, record-like bytes: words from a small vocabulary."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choice(b"abcdefghijklmnop") for _ in range(rnd.randint(2, 9))) for _ in range(400)]
    out = bytearray()
    while len(out) < size:
        out += rnd.choice(words) + b" "
    return bytes(out[:size])


def _random(size: int, seed: int = 1) -> bytes:
    """Incompressible bytes, the same on every run."""
    return random.Random(seed).randbytes(size)


MIXED_100K = _random(40_000) + _text(60_000)  # crosses 32 KiB snappy chunks and 64 KiB lz4 blocks
SIZES = {"empty": b"", "one": b"x", "mixed-100k": MIXED_100K, "random-70k": _random(70_000, 2)}


def _magics(codec: CompressionType) -> list[int]:
    return [2] if codec is C.ZSTD else [0, 1, 2]


def _lz4_blocks(frame: bytes, header_len: int = 7) -> list[tuple[int, bytes]]:
    """Walk a checksum-free LZ4 frame: [(size word, block bytes)], asserting the end mark ends it."""
    blocks, pos = [], header_len
    while (word := struct.unpack_from("<I", frame, pos)[0]) != 0:
        size = word & 0x7FFFFFFF
        blocks.append((word, frame[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    assert frame[pos:] == END_MARK
    return blocks


# --- CompressionType --------------------------------------------------------------------------------


def test_ids_and_kafka_names() -> None:
    assert [(c.value, c.name_kafka) for c in ALL] == [
        (0, "none"),
        (1, "gzip"),
        (2, "snappy"),
        (3, "lz4"),
        (4, "zstd"),
    ]


@pytest.mark.parametrize("name", ["none", "GZIP", "Snappy", "lz4", "zStd"])
def test_from_name_is_case_insensitive(name: str) -> None:
    assert C.from_name(name).name_kafka == name.lower()


@pytest.mark.parametrize("name", ["uncompressed", "producer", "lz5", ""])
def test_from_name_rejects_unknown_names(name: str) -> None:
    with pytest.raises(CompressionError, match=f"'{name}'.*none, gzip, snappy, lz4, zstd"):
        C.from_name(name)


@pytest.mark.parametrize("codec_id", [5, 7, -1])
def test_unknown_codec_id(codec_id: int) -> None:
    with pytest.raises(CompressionError, match=f"codec id {codec_id}"):
        decompress(codec_id, b"abc")
    with pytest.raises(CompressionError, match=f"codec id {codec_id}"):
        compress(codec_id, b"abc")


# --- round trips --------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ALL, ids=lambda c: c.name_kafka)
@pytest.mark.parametrize("name", list(SIZES))
def test_round_trip(codec: CompressionType, name: str) -> None:
    data = SIZES[name]
    for magic in _magics(codec):
        encoded = compress(codec, data, magic=magic)
        assert isinstance(encoded, bytes)
        assert decompress(codec, encoded, magic=magic) == data
        assert decompress(int(codec), memoryview(encoded), magic=magic) == data


@pytest.mark.parametrize("codec", ALL, ids=lambda c: c.name_kafka)
def test_accepts_buffers_with_offsets(codec: CompressionType) -> None:
    padded = b"#####" + MIXED_100K
    encoded = compress(codec, memoryview(padded)[5:])
    assert decompress(codec, bytearray(b"@@" + encoded)[2:]) == MIXED_100K
    assert decompress(codec, memoryview(b"@@" + encoded)[2:]) == MIXED_100K


@pytest.mark.parametrize("level", [1, 3, 12, 17])
def test_lz4_hc_levels_round_trip(level: int) -> None:
    for magic in (0, 2):
        encoded = compress(C.LZ4, MIXED_100K, level, magic=magic)
        assert encoded[:7] == (LZ4_HEADER_V0 if magic == 0 else LZ4_HEADER)
        # liblz4's frame API adds block checksums; none may be left between Kafka's blocks.
        blocks = _lz4_blocks(encoded)
        assert 7 + sum(4 + len(block) for _, block in blocks) + 4 == len(encoded)
        assert decompress(C.LZ4, encoded, magic=magic) == MIXED_100K


_payloads = st.binary(max_size=3000) | st.builds(
    lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=50), st.integers(0, 4000)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from(ALL), data=_payloads, magic=st.sampled_from([0, 1, 2]))
def test_property_round_trip(codec: CompressionType, data: bytes, magic: int) -> None:
    if codec is C.ZSTD:
        magic = 2
    assert decompress(codec, compress(codec, data, magic=magic), magic=magic) == data


@settings(max_examples=40, deadline=None)
@given(data=_payloads, level=st.integers(1, 17))
def test_property_lz4_every_level(data: bytes, level: int) -> None:
    encoded = compress(C.LZ4, data, level)
    assert lz4.frame.decompress(encoded) == data


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from(ALL), data=_payloads | st.binary(min_size=65530, max_size=140_000))
def test_compress_into_writes_the_bytes_of_compress(codec: CompressionType, data: bytes) -> None:
    """Within ``compress_bound``'s room (guarded by a canary), the bytes ``compress`` returns: Kafka's
    checksum vectors and every property of ``compress`` carry over to the cleaner's path."""
    room = compress_bound(len(data))
    out = bytearray(b"\xa5" * (room + 16))
    written = compress_into(codec, memoryview(data), memoryview(out)[:room])
    assert bytes(out[:written]) == compress(codec, data)
    assert out[room:] == b"\xa5" * 16


# --- gzip ---------------------------------------------------------------------------------------------


def test_gzip_framing_matches_jdk() -> None:
    data = _text(20_000)
    encoded = compress(C.GZIP, data)
    # GZIPOutputStream on JDK >= 16: no flags, mtime 0, XFL 0, OS 0xFF.
    assert encoded[:10] == bytes.fromhex("1f8b08000000000000ff")
    assert encoded[-8:] == struct.pack("<II", zlib.crc32(data), len(data))
    # Kafka's default level -1 is zlib's 6.
    assert encoded[10:-8] == zlib.compress(data, 6, wbits=-15)
    assert compress(C.GZIP, data, -1) == encoded
    assert len(compress(C.GZIP, data, 1)) > len(compress(C.GZIP, data, 9))


def test_gzip_multi_member_and_trailing_bytes() -> None:
    first, second = compress(C.GZIP, b"first "), compress(C.GZIP, b"second")
    assert decompress(C.GZIP, first + second) == b"first second"
    # GZIPInputStream ignores what follows a member when it is not another gzip header.
    assert decompress(C.GZIP, first + b"junk") == b"first "


# --- snappy -------------------------------------------------------------------------------------------


def test_snappy_xerial_header_and_chunks() -> None:
    encoded = compress(C.SNAPPY, MIXED_100K)
    assert encoded[:16] == XERIAL_HEADER
    pos, chunks = 16, []
    while pos < len(encoded):
        (size,) = struct.unpack_from(">i", encoded, pos)
        chunks.append(snappy.decompress(encoded[pos + 4 : pos + 4 + size]))  # one raw block each
        pos += 4 + size
    assert pos == len(encoded)
    assert [len(c) for c in chunks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(chunks) == MIXED_100K


def test_snappy_empty_input_is_header_only() -> None:
    assert compress(C.SNAPPY, b"") == XERIAL_HEADER
    assert decompress(C.SNAPPY, XERIAL_HEADER) == b""


@pytest.mark.parametrize("size", [1, 15, 100, 130, 20_000])
def test_snappy_raw_block_fallback(size: int) -> None:
    data = _random(size, size)
    raw = snappy.compress(data)  # a bare raw block, as librdkafka and others write
    assert raw[:8] != XERIAL_HEADER[:8]
    assert decompress(C.SNAPPY, raw) == data


def test_snappy_raw_block_starting_with_0x82() -> None:
    # Length 130 encodes as varint 82 01: snappy-java still takes the raw path (no full magic).
    data = _random(130, 3)
    raw = snappy.compress(data)
    assert raw[0] == 0x82 and len(raw) >= 16
    assert decompress(C.SNAPPY, raw) == data


def test_snappy_concatenated_streams_and_short_tail() -> None:
    joined = compress(C.SNAPPY, b"first ") + compress(C.SNAPPY, b"second")
    assert decompress(C.SNAPPY, joined) == b"first second"
    # snappy-java stops at fewer than 4 trailing bytes instead of failing.
    assert decompress(C.SNAPPY, compress(C.SNAPPY, b"abc") + b"\x00\x00") == b"abc"


@pytest.mark.parametrize(
    ("suffix", "message"),
    [(struct.pack(">i", 50) + b"short", "claims 50 bytes"), (struct.pack(">i", -5), "claims -5 bytes")],
)
def test_snappy_bad_chunk_length(suffix: bytes, message: str) -> None:
    with pytest.raises(CompressionError, match=message):
        decompress(C.SNAPPY, compress(C.SNAPPY, b"abc") + suffix)


# --- lz4 framing --------------------------------------------------------------------------------------


def test_lz4_header_bytes() -> None:
    assert compress(C.LZ4, b"")[:7] == LZ4_HEADER
    assert compress(C.LZ4, b"", magic=1)[:7] == LZ4_HEADER
    assert compress(C.LZ4, b"", magic=0)[:7] == LZ4_HEADER_V0
    # The HC bytes are xxHash32 of FLG+BD (v1+) or of magic+FLG+BD (v0), second byte.
    assert LZ4_HEADER[6] == (xxhash.xxh32(LZ4_HEADER[4:6]).intdigest() >> 8) & 0xFF
    assert LZ4_HEADER_V0[6] == (xxhash.xxh32(LZ4_HEADER_V0[:6]).intdigest() >> 8) & 0xFF


def test_lz4_empty_input_is_header_plus_end_mark() -> None:
    assert compress(C.LZ4, b"") == LZ4_HEADER + END_MARK
    assert decompress(C.LZ4, LZ4_HEADER + END_MARK) == b""


def test_lz4_incompressible_blocks_are_stored() -> None:
    data = SIZES["random-70k"]
    encoded = compress(C.LZ4, data)
    assert _lz4_blocks(encoded) == [
        (0x80000000 | 65536, data[:65536]),
        (0x80000000 | (70_000 - 65536), data[65536:]),
    ]
    assert len(encoded) == 7 + (4 + 65536) + (4 + 4464) + 4


def test_lz4_block_that_does_not_shrink_is_stored() -> None:
    # 117 bytes that lz4 compresses to exactly 117: Lz4BlockOutputStream stores when compressed >= raw.
    data = bytes(range(100)) + bytes(7) + bytes(range(100, 110))
    assert len(lz4.block.compress(data, store_size=False)) == len(data)
    assert compress(C.LZ4, data) == LZ4_HEADER + struct.pack("<I", 0x80000000 | 117) + data + END_MARK


def test_lz4_compressed_blocks_are_64k_of_input_each() -> None:
    data = _text(150_000)
    blocks = _lz4_blocks(compress(C.LZ4, data))
    assert all(word & 0x80000000 == 0 for word, _ in blocks)
    inputs = [lz4.block.decompress(block, uncompressed_size=65536) for _, block in blocks]
    assert [len(i) for i in inputs] == [65536, 65536, 150_000 - 2 * 65536]
    assert b"".join(inputs) == data


def test_lz4_level_9_is_the_fast_compressor_and_others_hc() -> None:
    data = _text(100_000)
    fast, hc = compress(C.LZ4, data), compress(C.LZ4, data, 12)
    assert compress(C.LZ4, data, 9) == fast
    assert len(hc) < len(fast) * 0.95
    assert decompress(C.LZ4, hc) == data


# --- Kafka's LZ4 checksum vectors (spec §1.9, MemoryRecordsTest.testChecksum) -------------------------
# Two records (ts 283843 "key1"/"value1", ts 1234 "key2"/"value2") from base offset 0, compressed with
# LZ4 by Kafka: the batch CRCs pin the exact compressed bytes, so these check our frame byte for byte.

_V2_RECORDS = bytes.fromhex("20000000086b6579310c76616c756531002400e1bf2202086b6579320c76616c75653200")
_RECORDS = [(283843, b"key1", b"value1"), (1234, b"key2", b"value2")]


def _legacy_entry(
    magic: int, offset: int, attributes: int, timestamp: int, key: bytes | None, value: bytes
) -> bytes:
    body = bytes((magic, attributes)) + (struct.pack(">q", timestamp) if magic == 1 else b"")
    body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
    body += struct.pack(">i", len(value)) + value
    record = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(record)) + record


def test_kafka_lz4_checksum_vector_v2() -> None:
    section = compress(C.LZ4, _V2_RECORDS)
    # Attributes 3 (lz4), lastOffsetDelta 1, base/max timestamp, pid/epoch/seq -1, count 2.
    after_crc = struct.pack(">hiqqqhii", 3, 1, 283843, 283843, -1, -1, -1, 2) + section
    assert crc32c.crc32c(after_crc) == 2745969314


@pytest.mark.parametrize(("magic", "expected"), [(0, 66944826), (1, 1407303399)])
def test_kafka_lz4_checksum_vector_legacy(magic: int, expected: int) -> None:
    inner = b"".join(_legacy_entry(magic, i, 0, ts, k, v) for i, (ts, k, v) in enumerate(_RECORDS))
    value = compress(C.LZ4, inner, magic=magic)
    wrapper = _legacy_entry(magic, 1, 3, 283843, None, value)  # lz4 wrapper, timestamp = max inner
    (crc,) = struct.unpack_from(">I", wrapper, 12)
    assert crc == expected
    assert decompress(C.LZ4, value, magic=magic) == inner


# --- lz4 reading other writers -------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX4MB])
@pytest.mark.parametrize("store_size", [False, True])
@pytest.mark.parametrize("checksums", [False, True])
def test_lz4_reads_python_lz4_frames(block_size: int, store_size: bool, checksums: bool) -> None:
    frame = lz4.frame.compress(
        MIXED_100K,
        block_size=block_size,
        block_linked=False,
        store_size=store_size,
        block_checksum=checksums,
        content_checksum=checksums,
    )
    assert decompress(C.LZ4, frame) == MIXED_100K


def test_lz4_python_lz4_reads_ours() -> None:
    for data in SIZES.values():
        assert lz4.frame.decompress(compress(C.LZ4, data)) == data


def test_lz4_magic0_broken_hc_with_content_size() -> None:
    frame = bytearray(lz4.frame.compress(MIXED_100K, block_linked=False, store_size=True))
    assert frame[4] & 0x08  # content size present: Kafka 0.8's HC also covers those 8 bytes
    frame[14] = (xxhash.xxh32(bytes(frame[:14])).intdigest() >> 8) & 0xFF
    assert decompress(C.LZ4, frame, magic=0) == MIXED_100K
    with pytest.raises(CompressionError, match="header checksum"):
        decompress(C.LZ4, frame, magic=2)


def test_lz4_magic0_skips_hc_check_and_magic1_does_not() -> None:
    frame = bytearray(compress(C.LZ4, MIXED_100K))
    frame[6] ^= 0xFF
    assert decompress(C.LZ4, frame, magic=0) == MIXED_100K
    for magic in (1, 2):
        with pytest.raises(CompressionError, match="header checksum 0x7d != 0x82"):
            decompress(C.LZ4, frame, magic=magic)


def test_lz4_bytes_after_end_mark_are_ignored_like_kafka() -> None:
    assert decompress(C.LZ4, compress(C.LZ4, b"abc") + b"trailing") == b"abc"


def test_lz4_block_checksum_mismatch() -> None:
    frame = bytearray(
        lz4.frame.compress(b"a" * 1000, block_linked=False, store_size=False, block_checksum=True)
    )
    (word,) = struct.unpack_from("<I", frame, 7)
    frame[7 + 4 + (word & 0x7FFFFFFF)] ^= 1  # first byte of the block checksum
    with pytest.raises(CompressionError, match="checksum"):
        decompress(C.LZ4, frame)


def test_lz4_content_checksum_mismatch() -> None:
    frame = bytearray(
        lz4.frame.compress(b"a" * 1000, block_linked=False, store_size=False, content_checksum=True)
    )
    frame[-1] ^= 1
    with pytest.raises(CompressionError, match="checksum"):
        decompress(C.LZ4, frame)


# --- kafka-python's codecs, both directions ----------------------------------------------------------

_KAFKA_PYTHON = {
    C.GZIP: (kafka_codec.gzip_encode, kafka_codec.gzip_decode),
    C.SNAPPY: (lambda d: kafka_codec.snappy_encode(d, xerial_compatible=True), kafka_codec.snappy_decode),
    C.LZ4: (kafka_codec.lz4_encode, kafka_codec.lz4_decode),
    C.ZSTD: (kafka_codec.zstd_encode, kafka_codec.zstd_decode),
}


@pytest.mark.parametrize("codec", list(_KAFKA_PYTHON), ids=lambda c: c.name_kafka)
@pytest.mark.parametrize("name", ["one", "mixed-100k", "random-70k"])
def test_kafka_python_interop(codec: CompressionType, name: str) -> None:
    data = SIZES[name]
    encode, decode = _KAFKA_PYTHON[codec]
    assert decode(compress(codec, data)) == data
    assert decompress(codec, encode(data)) == data


def test_kafka_python_old_kafka_lz4_interop() -> None:
    ours = compress(C.LZ4, MIXED_100K, magic=0)
    assert kafka_codec.lz4_decode_old_kafka(ours) == MIXED_100K
    theirs = kafka_codec.lz4_encode_old_kafka(MIXED_100K)
    assert theirs[:7] == LZ4_HEADER_V0
    assert decompress(C.LZ4, theirs, magic=0) == MIXED_100K


# --- zstd ---------------------------------------------------------------------------------------------


def test_zstd_writes_no_content_size_and_uses_level_3() -> None:
    data = _text(100_000)
    encoded = compress(C.ZSTD, data)
    assert encoded[:4] == bytes.fromhex("28b52ffd")
    assert zstandard.get_frame_parameters(encoded).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert compress(C.ZSTD, data, 3) == encoded
    assert compress(C.ZSTD, data, 19) != encoded
    assert zstandard.ZstdDecompressor().decompressobj().decompress(encoded) == data


def test_zstd_reads_streamed_frames_without_content_size() -> None:
    streamer = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    first = streamer.compress(MIXED_100K) + streamer.flush()
    assert zstandard.get_frame_parameters(first).content_size == zstandard.CONTENTSIZE_UNKNOWN
    second = zstandard.ZstdCompressor().compress(b"tail")  # a second, concatenated frame
    assert decompress(C.ZSTD, first + second) == MIXED_100K + b"tail"


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_needs_magic_2(magic: int) -> None:
    with pytest.raises(CompressionError, match=f"zstd requires record format magic 2, got magic {magic}"):
        compress(C.ZSTD, b"abc", magic=magic)
    with pytest.raises(CompressionError, match="zstd requires"):
        decompress(C.ZSTD, compress(C.ZSTD, b"abc"), magic=magic)


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codec", "level", "message"),
    [
        (C.GZIP, 0, r"compression.gzip.level 0 is out of range -1..9"),
        (C.GZIP, 10, r"compression.gzip.level 10"),
        (C.LZ4, 0, r"compression.lz4.level 0 is out of range 1..17"),
        (C.LZ4, 18, r"compression.lz4.level 18"),
        (C.ZSTD, 23, r"compression.zstd.level 23 is out of range -131072..22"),
        (C.SNAPPY, 1, r"snappy has no compression level"),
        (C.NONE, 1, r"none has no compression level"),
    ],
)
def test_bad_levels(codec: CompressionType, level: int, message: str) -> None:
    with pytest.raises(CompressionError, match=message):
        compress(codec, b"abc", level)


def test_unknown_magic() -> None:
    with pytest.raises(CompressionError, match="magic 3"):
        decompress(C.GZIP, compress(C.GZIP, b"abc"), magic=3)


def test_lz4_truncated_frames() -> None:
    frame = compress(C.LZ4, MIXED_100K)
    for cut in [*range(0, 12), 5000, 65540, len(frame) - 5, len(frame) - 1]:
        with pytest.raises(CompressionError, match="lz4"):
            decompress(C.LZ4, frame[:cut])
    with pytest.raises(CompressionError, match="no end mark"):
        decompress(C.LZ4, frame[:-1])
    with pytest.raises(CompressionError, match="truncated"):
        decompress(C.LZ4, frame[:5000])


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"\x05\x22\x4d\x18\x60\x40\x82" + END_MARK, "starts with '05224d18', expected 04224d18"),
        (LZ4_HEADER[:4] + b"\xa0\x40\x00" + END_MARK, "FLG byte 0xa0 has version != 1"),
        (LZ4_HEADER[:4] + b"\x62\x40\x00" + END_MARK, "FLG byte 0x62 .*reserved"),
        (LZ4_HEADER[:4] + b"\x40\x40\x00" + END_MARK, "dependent blocks"),
        (LZ4_HEADER[:4] + b"\x60\x30\x00" + END_MARK, "BD byte 0x30"),
        (LZ4_HEADER[:4] + b"\x60\x41\x00" + END_MARK, "BD byte 0x41"),
        (LZ4_HEADER[:6] + b"\x00" + END_MARK, "header checksum 0x00 != 0x82"),
        (
            LZ4_HEADER + struct.pack("<I", 0x80000000 | 65537) + bytes(65537) + END_MARK,
            "65537 bytes > max 65536",
        ),
    ],
)
def test_lz4_bad_frames(frame: bytes, message: str) -> None:
    with pytest.raises(CompressionError, match=message):
        decompress(C.LZ4, frame)


def test_lz4_rejects_linked_blocks_from_python_lz4() -> None:
    frame = lz4.frame.compress(MIXED_100K, block_linked=True)
    with pytest.raises(CompressionError, match="Kafka requires block independence"):
        decompress(C.LZ4, frame)


def test_lz4_corrupt_block_data() -> None:
    frame = bytearray(compress(C.LZ4, _text(10_000)))
    frame[11:40] = b"\xff" * 29  # garbage tokens inside the first compressed block
    with pytest.raises(CompressionError, match="corrupt lz4 data"):
        decompress(C.LZ4, frame)


@pytest.mark.parametrize(
    ("codec", "payload", "message"),
    [
        (C.GZIP, b"this is not gzip at all", "corrupt gzip data"),
        (C.GZIP, b"", "gzip data .* truncated"),
        (C.SNAPPY, b"", "corrupt snappy data"),
        (C.SNAPPY, b"\xff\xff\xff\xff\x0fnot snappy", "corrupt snappy data"),
        (C.ZSTD, b"\x28\xb5\x2f\xfd", "corrupt zstd data"),
        (C.ZSTD, b"garbage!", "corrupt zstd data"),
    ],
)
def test_garbage_payloads(codec: CompressionType, payload: bytes, message: str) -> None:
    with pytest.raises(CompressionError, match=message):
        decompress(codec, payload)


@pytest.mark.parametrize("codec", [C.GZIP, C.SNAPPY, C.ZSTD], ids=lambda c: c.name_kafka)
def test_truncated_payloads(codec: CompressionType) -> None:
    encoded = compress(codec, MIXED_100K)
    for cut in (1, 10, len(encoded) // 2):
        with pytest.raises(CompressionError, match=codec.name_kafka):
            decompress(codec, encoded[:-cut])


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(ALL), payload=st.binary(max_size=200), magic=st.sampled_from([0, 1, 2]))
def test_property_garbage_raises_only_compression_error(
    codec: CompressionType, payload: bytes, magic: int
) -> None:
    try:
        result = decompress(codec, payload, magic=magic)
    except CompressionError:
        return
    assert isinstance(result, bytes)


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(ALL[1:]), position=st.integers(0, 10**6), flip=st.integers(1, 255))
def test_property_corrupted_frames_raise_only_compression_error(
    codec: CompressionType, position: int, flip: int
) -> None:
    encoded = bytearray(compress(codec, _text(3000)))
    encoded[position % len(encoded)] ^= flip
    try:
        result = decompress(codec, encoded)
    except CompressionError:
        return
    assert isinstance(result, bytes)
