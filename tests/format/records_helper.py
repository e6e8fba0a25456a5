"""Shared by the format tests (and the cleaner's legacy tests): the bulk path's columns turned back
into Records, and legacy message sets as kafka-python writes them."""

from __future__ import annotations

from typing import Any

from kafka.record.legacy_records import LegacyRecordBatchBuilder

from kafkalog.format.batch import Record, increment_sequence
from kafkalog.format.scan import scan_batches, scan_records
from kafkalog.format.varint import decode_varint


def scanned(buf: Any) -> list[Record]:
    """Every record of ``buf`` through the bulk path, as Records (sequence from the batch columns)."""
    batches = scan_batches(buf)
    cols = scan_records(buf, batches)
    out = []
    for i in range(len(cols)):
        b = int(cols.batch_index[i])
        base_sequence = int(batches.base_sequence[b])
        delta = int(cols.offset[i]) - int(batches.base_offset[b])
        sequence = increment_sequence(base_sequence, delta) if base_sequence >= 0 else -1
        headers = []
        pos, end = int(cols.headers_pos[i]), int(cols.record_pos[i]) + int(cols.record_size[i])
        data = memoryview(cols.data)
        for _ in range(int(cols.headers_count[i])):
            n, pos = decode_varint(data, pos, end)
            key = bytes(data[pos:pos + n]).decode()
            pos += n
            n, pos = decode_varint(data, pos, end)
            headers.append((key, None if n < 0 else bytes(data[pos:pos + n])))
            pos += max(n, 0)
        assert cols.header_keys(i) == [k for k, _ in headers]  # the columns' own header reader agrees
        out.append(Record(int(cols.offset[i]), int(cols.timestamp[i]), cols.key(i), cols.value(i),
                          tuple(headers), sequence))
    return out


def message_set(magic: int, rows: list[tuple[int, int, bytes | None, bytes | None]]) -> bytes:
    """Uncompressed v0/v1 entries, one per row (offset, timestamp, key, value), as kafka-python writes them."""
    out = b""
    for offset, timestamp, key, value in rows:
        builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
        builder.append(offset, timestamp, key, value)
        out += bytes(builder.build())
    return out
