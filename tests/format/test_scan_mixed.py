"""``scan_records`` of segments holding legacy entries, alone or followed by v2 batches (what a
message format upgrade leaves on disk): each batch is read by its own magic, as Kafka's readers do.

Legacy entries are written by kafka-python's ``LegacyRecordBatchBuilder`` and v2 batches by
``build_batch``; the expected records are written out in each test, and kafka-python's
``MemoryRecords`` reads the same bytes as a second reader.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from kafka.record import MemoryRecords as KafkaPythonMemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from records_helper import message_set, scanned

from kafkalog.errors import CompressionError, InvalidRecordError
from kafkalog.format.batch import Record, build_batch, compute_crc
from kafkalog.format.compression import CompressionType
from kafkalog.format.crc import crc32c
from kafkalog.format.scan import ColumnWorkspace, scan_batches, scan_records

C = CompressionType


def legacy_set(magic: int, codec: CompressionType, rows: list[tuple[int, int, bytes | None, bytes | None]]) -> bytes:
    """Entries of ``rows`` (offset, timestamp, key, value): one per row, or one wrapper at the last offset."""
    if codec is C.NONE:
        return message_set(magic, rows)
    builder = LegacyRecordBatchBuilder(magic, int(codec), 1 << 20)
    for i, (offset, timestamp, key, value) in enumerate(rows):
        builder.append(i if magic == 1 else offset, timestamp, key, value)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, rows[-1][0])
    return bytes(data)


HEADERS = (("trace", b"t1"), ("none", None))
# A v0 gzip wrapper, a plain v0 message, a v1 snappy wrapper, then (format upgraded) v2 batches: plain
# with headers, lz4, an emptied one (as the cleaner leaves a producer's last batch), then legacy again and
# one more v2 batch: a run of uncompressed batches, whose records the scan reads in the file itself.
PARTS: list[tuple[bytes, list[Record]]] = [
    (legacy_set(0, C.GZIP, [(0, -1, b"a", b"0"), (1, -1, None, b"1"), (2, -1, b"a", None)]),
     [Record(0, -1, b"a", b"0"), Record(1, -1, None, b"1"), Record(2, -1, b"a", None)]),
    (legacy_set(0, C.NONE, [(3, -1, b"b", b"3")]), [Record(3, -1, b"b", b"3")]),
    (legacy_set(1, C.SNAPPY, [(4, 1_000, b"c", b"4"), (5, 900, b"d", b"5")]),
     [Record(4, 1_000, b"c", b"4"), Record(5, 900, b"d", b"5")]),
    (build_batch([Record(6, 2_000, b"e", b"6", HEADERS), Record(8, 2_001, b"f", b"8")]),
     [Record(6, 2_000, b"e", b"6", HEADERS), Record(8, 2_001, b"f", b"8")]),
    (build_batch([Record(9, 3_000, b"g", b"9" * 300), Record(10, 3_001, None, b"10")], compression_type=C.LZ4),
     [Record(9, 3_000, b"g", b"9" * 300), Record(10, 3_001, None, b"10")]),
    (build_batch([Record(11, 4_000, b"h", b"11")], producer_id=7, producer_epoch=0, base_sequence=0)[:61], []),
    (legacy_set(1, C.NONE, [(12, 5_000, b"i", b"12")]), [Record(12, 5_000, b"i", b"12")]),
    (build_batch([Record(13, 6_000, b"j", b"13")]), [Record(13, 6_000, b"j", b"13")]),
]


def _emptied(batch: bytes) -> bytes:
    """A v2 batch cut to its header as an empty batch: count 0, length 49, CRC recomputed."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 8, 49)
    struct.pack_into(">i", out, 57, 0)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


SEGMENT = b"".join(_emptied(data) if not want else data for data, want in PARTS)
WANT = [record for _, want in PARTS for record in want]


def test_mixed_segment_reads_every_batch_by_its_magic() -> None:
    batches = scan_batches(SEGMENT)
    assert batches.magic.tolist() == [0, 0, 1, 2, 2, 2, 1, 2]
    assert scanned(SEGMENT) == WANT
    cols = scan_records(SEGMENT, batches)
    assert cols.batch_index.tolist() == [0, 0, 0, 1, 2, 2, 3, 3, 4, 4, 6, 7]
    assert cols.headers_count.tolist() == [0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0]


def test_kafka_python_reads_the_same_records() -> None:
    peer = []
    records = KafkaPythonMemoryRecords(SEGMENT)
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None and batch.validate_crc()
        peer += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in batch]
    assert peer == [(r.offset, r.timestamp, r.key, r.value) for r in WANT]


def test_v2_records_span_the_bytes_of_the_same_batch_scanned_alone() -> None:
    cols = scan_records(SEGMENT, scan_batches(SEGMENT))
    for part in (3, 4, 7):  # the v2 batches with records
        alone = scan_records(PARTS[part][0], scan_batches(PARTS[part][0]))
        rows = np.flatnonzero(cols.batch_index == part)
        assert len(rows) == len(alone)
        for row, i in zip(rows.tolist(), range(len(alone)), strict=True):
            mixed_bytes = cols.data[cols.record_pos[row]:cols.record_pos[row] + cols.record_size[row]].tobytes()
            assert mixed_bytes == alone.data[alone.record_pos[i]:alone.record_pos[i] + alone.record_size[i]].tobytes()
            assert cols.headers_pos[row] - cols.record_pos[row] == alone.headers_pos[i] - alone.record_pos[i]


def test_legacy_records_span_their_message_from_its_crc() -> None:
    cols = scan_records(SEGMENT, scan_batches(SEGMENT))
    legacy_rows = np.flatnonzero(np.isin(cols.batch_index, [0, 1, 2, 6]))
    assert cols.legacy_magic(legacy_rows).tolist() == [0, 0, 0, 0, 1, 1, 1]
    for row in legacy_rows.tolist():
        message = cols.data[cols.record_pos[row]:cols.record_pos[row] + cols.record_size[row]].tobytes()
        (crc,) = struct.unpack_from(">I", message)
        assert crc == zlib.crc32(message[4:])
        assert cols.headers_pos[row] == cols.record_pos[row] + cols.record_size[row]
    # the plain v0 message is the file's own bytes, from its CRC at byte 12 of the entry
    plain = int(np.flatnonzero(cols.batch_index == 1)[0])
    start = len(PARTS[0][0])
    assert cols.data[cols.record_pos[plain]:cols.record_pos[plain] + cols.record_size[plain]].tobytes() == \
        SEGMENT[start + 12:start + len(PARTS[1][0])]


def test_a_window_of_the_segment_gives_its_share() -> None:
    batches = scan_batches(SEGMENT)
    for lo, hi in ((2, 5), (3, 6), (5, 7), (6, 8)):
        cols = scan_records(SEGMENT, batches.window(lo, hi), workspace=ColumnWorkspace())
        want = [r for i, (_, records) in enumerate(PARTS) if lo <= i < hi for r in records]
        assert [(int(o), cols.key(i), cols.value(i)) for i, o in enumerate(cols.offset)] == \
            [(r.offset, r.key, r.value) for r in want]


def test_all_legacy_and_empty_inputs() -> None:
    legacy_only = PARTS[0][0] + PARTS[1][0]
    assert scanned(legacy_only) == WANT[:4]
    assert len(scan_records(b"", scan_batches(b""))) == 0


def test_a_bad_v2_record_after_legacy_entries_names_its_batch() -> None:
    v2 = bytearray(PARTS[3][0])
    v2[61] = 0x7F  # the first record's length: past the batch end
    struct.pack_into(">I", v2, 17, compute_crc(v2))
    data = PARTS[0][0] + bytes(v2)
    with pytest.raises(InvalidRecordError, match=f"batch at byte {len(PARTS[0][0])} \\(offset 6\\)"):
        scan_records(data, scan_batches(data))


def test_a_bad_legacy_wrapper_after_v2_batches_fails() -> None:
    bad = legacy_set(1, C.GZIP, [(20, 1, b"a", b"x"), (21, 2, b"b", b"y")])
    bad = bad[:-8] + b"\x00" * 8  # the gzip trailer (CRC and size) destroyed
    data = PARTS[3][0] + bad
    with pytest.raises(CompressionError, match="corrupt gzip data .*incorrect data check"):
        scan_records(data, scan_batches(data))
