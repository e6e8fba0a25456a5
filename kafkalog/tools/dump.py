"""``kafka-dump-log.sh`` (``kafka.tools.DumpLogSegments``, spec §14): the same output, line for line.

Each file prints ``Dumping <path>`` and is dispatched on the text after the last dot of its name:
``.log`` and KRaft ``.checkpoint`` snapshots (batches; records with ``--deep-iteration``), ``.index``,
``.timeindex``, ``.txnindex``, ``.snapshot``; anything else is ignored with a note on ``err``. What Kafka
collects on the way (index mismatches, non-consecutive offsets) goes to ``err`` after the last file, in
Kafka's order. Where Kafka's tool throws (a length field below 14, a ``.log`` missing beside an index,
a failed sanity check) the dump stops with one line on ``err`` and exit code 1, after the lines Kafka
prints before its stack trace (up to the failing batch: records it printed from inside that batch are not).

Index files are read the way Kafka's dump reads them, every slot up to ``length // entry_size`` with
the stop at the first zero-filled slot after the first, rather than through :mod:`kafkalog.log.index`,
which drops that tail on load: Kafka's sanity check and time-index lookups see those slots.

Big segments: batch headers come from :func:`scan_batches` and records from :func:`scan_records` in
chunks of batches, so the time goes into formatting Kafka's lines, not into parsing.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from kafkalog.errors import KafkaLogError
from kafkalog.format import compression, legacy
from kafkalog.format.batch import (
    HEADER,
    ControlType,
    TimestampType,
    parse_control_type,
    parse_end_txn_marker,
)
from kafkalog.format.compression import CompressionType
from kafkalog.format.crc import crc32, crc32c
from kafkalog.format.scan import BatchColumns, RecordColumns, scan_batches, scan_records
from kafkalog.log.names import file_kind
from kafkalog.log.producer_snapshot import ProducerSnapshotEntry, format_snapshot_dump_line
from kafkalog.log.txn_index import AbortedTxn, format_dump_line

__all__ = ["dump_files"]

MAX_INT = (1 << 31) - 1
_HEADER = 61  # v2 batch header size
_PAD = 64  # zero bytes after a file's data: a v2 header read of a tiny last entry stays in bounds
_CHUNK = 4096  # batches per scan-and-format round: bounds memory on multi-GB segments
_TS_LABEL = {0: "CreateTime", 8: "LogAppendTime"}
_KRAFT_LABEL = {3: "SnapshotHeader", 4: "SnapshotFooter", 5: "KRaftVersion", 6: "KRaftVoters"}
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")
_BATCH_FIELDS = ("position", "size", "base_offset", "last_offset_delta", "magic", "attributes", "crc",
                 "records_count", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                 "base_sequence", "partition_leader_epoch")
_OFFSET_INDEX = np.dtype([("offset", ">i4"), ("position", ">i4")])
_TIME_INDEX = np.dtype([("timestamp", ">i8"), ("offset", ">i4")])
# Kafka's stderr reports, in its order: (kind, per-file heading, line, newest first). The index and
# non-consecutive lists are Scala lists Kafka prepends to, so they print in reverse.
_REPORTS = (
    ("index", "Mismatches in :{}", "  Index offset: {}, log offset: {}", True),
    ("time", "Found timestamp mismatch in :{}", "  Index timestamp: {}, log timestamp: {}", False),
    ("order", "Found out of order timestamp in :{}",
     "  Index timestamp: {}, Previously indexed timestamp: {}", False),
    ("missing", "The following indexed offsets are not found in the log.",
     "Indexed offset: {}, found log offset: {}", False),
    ("gaps", "Non-consecutive offsets in {}", "  {} is followed by {}", True),
)
_Reports = dict[str, dict[str, list[tuple[int, int]]]]  # kind -> absolute path -> pairs
_Row = tuple[int, str, bytes | None, bytes | None]  # record offset, metadata text, key, value


class _Abort(KafkaLogError):
    """Where Kafka's tool throws: the dump stops and the collected reports are not printed."""


@dataclass(frozen=True)
class _Options:
    print_data_log: bool
    deep_iteration: bool
    verify_index_only: bool
    index_sanity_check: bool
    max_message_size: int
    max_bytes: int
    skip_record_metadata: bool


def dump_files(
    paths: Sequence[Path], *, print_data_log: bool = False, deep_iteration: bool = False,
    verify_index_only: bool = False, index_sanity_check: bool = False, max_message_size: int = 5242880,
    max_bytes: int = MAX_INT, skip_record_metadata: bool = False, out: TextIO, err: TextIO,
) -> int:
    """Print ``kafka-dump-log --files <paths>``; return 0, or 1 where Kafka's tool would throw. A path
    that is not a regular file (a FIFO, whose open would wait for a writer forever; a directory; a
    device) is refused before anything is printed."""
    for path in paths:
        _check_regular(path, os.stat(path).st_mode if os.path.exists(path) else None)
    opts = _Options(print_data_log, deep_iteration or print_data_log, verify_index_only,
                    index_sanity_check, max_message_size, max_bytes, skip_record_metadata)
    reports: _Reports = {kind: {} for kind, *_ in _REPORTS}
    for path in paths:
        out.write(f"Dumping {path}\n")
        name = path.name
        # Kafka crashes on a name without a dot (substring(-1)); we call it an unknown file instead.
        suffix = name[name.rfind("."):] if "." in name else ""
        try:
            if suffix in (".log", ".checkpoint"):
                _dump_log(path, opts, reports, out)
            elif suffix == ".index":
                _dump_index(path, opts, reports, out)
            elif suffix == ".timeindex":
                _dump_time_index(path, opts, reports, out)
            elif suffix == ".snapshot":
                _dump_producer_snapshot(path, out, err)
            elif suffix == ".txnindex":
                _dump_txn_index(path, out)
            else:
                err.write(f"Ignoring unknown file {path}\n")
        except (KafkaLogError, OSError, ValueError, struct.error) as exc:
            err.write(f"Error dumping {path}: {exc}\n")
            return 1
    for kind, heading, line, newest_first in _REPORTS:
        for name, pairs in reports[kind].items():
            err.write(heading.format(name) + "\n")
            err.writelines(line.format(a, b) + "\n" for a, b in (reversed(pairs) if newest_first else pairs))
    return 0


# --- .log and KRaft .checkpoint -------------------------------------------------------------------

def _dump_log(path: Path, opts: _Options, reports: _Reports, out: TextIO) -> None:
    name = path.name
    if name.endswith(".log"):
        out.write(f"Log starting offset: {_java_long(name.split('.')[0])}\n")
    elif name == "bootstrap.checkpoint":
        out.write("KRaft bootstrap snapshot\n")
    else:  # Snapshots.parse: <20-digit end offset>-<10-digit epoch>.checkpoint
        if len(name) < 31:
            raise _Abort(f"{name} is not a KRaft snapshot name <offset(20)>-<epoch(10)>.checkpoint")
        out.write(f"Snapshot end offset: {_java_long(name[:20])}, epoch: {_java_long(name[21:31], 32)}\n")
    arr, file_len = _read(path)
    if opts.max_bytes < 0:
        raise _Abort(f"Invalid size: {opts.max_bytes} in read from {path}")
    end = min(file_len, opts.max_bytes)
    cols, error = _frame(arr, 0, end, file_len, str(path))
    gaps: list[tuple[int, int]] = []
    last = [-1]  # the previous record's offset across batches (Kafka's ``lastOffset``)
    for a in range(0, len(cols), _CHUNK):
        lines: list[str] = []
        try:
            _dump_chunk(arr, _slice(cols, a, min(a + _CHUNK, len(cols))), opts, lines, gaps, last, str(path))
        finally:  # what was formatted before a failure is what Kafka printed before throwing
            if lines:
                out.write("\n".join(lines) + "\n")
    if error is not None:
        raise _Abort(error)
    if gaps:
        reports["gaps"].setdefault(_absolute(path), []).extend(gaps)
    trailing = end - cols.valid_end
    if trailing > 0 and opts.max_bytes == MAX_INT:
        out.write(f"Found {trailing} invalid bytes at the end of {name}\n")


def _dump_chunk(arr: bytearray, cols: BatchColumns, opts: _Options, lines: list[str],
                gaps: list[tuple[int, int]], last: list[int], where: str) -> None:
    view = memoryview(arr)
    magic = cols.magic.tolist()
    records = None
    if opts.deep_iteration and magic and 2 <= min(magic) and max(magic) < 128 and cols.size.min() >= _HEADER:
        try:  # one compiled scan for the chunk; after an error, batch by batch to fail where Kafka does
            records = scan_records(arr, cols, f"{where}: ")
        except (KafkaLogError, ValueError):
            records = None
    row = 0
    for i, (pos, size, base, delta, mag, attrs, crc, count, base_ts, max_ts, pid, epoch, base_seq,
            leader_epoch) in enumerate(zip(*(getattr(cols, name).tolist() for name in _BATCH_FIELDS), strict=True)):
        mag = mag - 256 if mag > 127 else mag  # Java reads the magic as a signed byte
        if mag >= 2 and size < _HEADER:  # Kafka reads the 61-byte header anyway, into the next entry
            (_, _, leader_epoch, _, crc, attrs, delta, base_ts, max_ts, pid, epoch, base_seq,
             count) = HEADER.unpack_from(arr, pos)
            attrs &= 0xFF
        codec = _codec_name(attrs)
        if mag >= 2:
            tt = _TS_LABEL[attrs & 0x08]
            valid = size >= _HEADER and crc32c(view[pos + 21:pos + size]) == crc
            horizon = f"OptionalLong[{base_ts}]" if attrs & 0x40 else "OptionalLong.empty"
            last_seq = -1 if base_seq == -1 else _increment_sequence(base_seq, delta)
            lines.append(
                f"baseOffset: {base} lastOffset: {base + delta} count: {count} baseSequence: {base_seq} "
                f"lastSequence: {last_seq} producerId: {pid} producerEpoch: {epoch} partitionLeaderEpoch: "
                f"{leader_epoch} isTransactional: {_bool(attrs & 0x10)} isControl: {_bool(attrs & 0x20)} "
                f"deleteHorizonMs: {horizon} position: {pos} {tt}: {max_ts} size: {size} magic: {mag} "
                f"compresscodec: {codec} crc: {crc} isvalid: {_bool(valid)}")
        else:
            tt = "NoTimestampType" if mag == 0 else _TS_LABEL[attrs & 0x08]
            valid = crc32(view[pos + 16:pos + size]) == crc
            lines.append(f"offset: {base} position: {pos} {tt}: {max_ts} size: {size} magic: {mag} "
                         f"compresscodec: {codec} crc: {crc} isvalid: {_bool(valid)}")
        if not opts.deep_iteration or (mag >= 2 and count <= 0):  # Kafka never reads these records
            continue
        is_control = mag >= 2 and bool(attrs & 0x20)
        rows: Iterator[_Row]
        if mag < 2:
            rows = _legacy_rows(view, pos, tt, where)
        elif records is not None:
            rows = _columnar_rows(records, row, count, tt, base, base_seq, is_control or opts.print_data_log)
            row += count
        else:
            one = scan_records(arr, _slice(cols, i, i + 1), f"{where}: ")
            rows = _columnar_rows(one, 0, count, tt, base, base_seq, is_control or opts.print_data_log)
        for offset, meta, key, value in rows:
            if last[0] != -1 and offset != last[0] + 1:
                gaps.append((last[0], offset))
            last[0] = offset
            lines.append(_record_line(opts, meta, is_control, key, value))


def _columnar_rows(rc: RecordColumns, start: int, count: int, tt: str, base: int, base_seq: int,
                   need_bytes: bool) -> Iterator[_Row]:
    end = start + count
    offsets, stamps = rc.offset[start:end].tolist(), rc.timestamp[start:end].tolist()
    key_lens, value_lens = rc.key_len[start:end].tolist(), rc.value_len[start:end].tolist()
    header_counts = rc.headers_count[start:end].tolist()
    for i in range(count):
        offset, row = offsets[i], start + i
        seq = _increment_sequence(base_seq, offset - base) if base_seq >= 0 else -1
        keys = ",".join(rc.header_keys(row)) if header_counts[i] else ""
        # Kafka reads any negative length as null (Utils.readBytes) and then reports -1.
        meta = (f"offset: {offset} {tt}: {stamps[i]} keySize: {max(key_lens[i], -1)} valueSize: "
                f"{max(value_lens[i], -1)} sequence: {seq} headerKeys: [{keys}]")
        yield offset, meta, rc.key(row) if need_bytes else None, rc.value(row) if need_bytes else None


def _legacy_rows(view: memoryview, pos: int, tt: str, where: str) -> Iterator[_Row]:
    for offset, timestamp, key, value, crc, valid in _legacy_records(view, pos, where):
        meta = (f"offset: {offset} {tt}: {timestamp} keySize: {_size(key)} valueSize: {_size(value)} "
                f"isValid: {_bool(valid)} crc: {crc}}}")  # the stray "}" is Kafka's
        yield offset, meta, key, value


def _record_line(opts: _Options, meta: str, is_control: bool, key: bytes | None, value: bytes | None) -> str:
    line, prefix = "", "| "
    if not opts.skip_record_metadata:
        line, prefix = "| " + meta, " "
        if is_control:
            line += _control_text(key, value)
    if opts.print_data_log and not is_control:  # StringDecoder: new String(bytes, UTF_8)
        if key is not None:
            line += f"{prefix}key: {key.decode('utf-8', 'replace')}"
        if value is not None:
            line += f" payload: {value.decode('utf-8', 'replace')}"
    return line


def _legacy_records(view: memoryview, pos: int,
                    where: str) -> list[tuple[int, int, bytes | None, bytes | None, int, bool]]:
    """(offset, timestamp, key, value, crc, crc ok) of a v0/v1 entry's records as Kafka's
    ``DeepRecordsIterator`` yields them, its librdkafka rule (wrapper offset 0) included."""
    outer = legacy.parse_entry(view, pos, where=where)
    if outer.compression is CompressionType.NONE:
        return [(outer.offset, outer.timestamp, outer.key, outer.value, outer.crc, legacy.is_valid(view, outer))]
    if outer.value is None:
        raise _Abort(f"Found invalid compressed record set with null value (magic = {outer.magic})")
    data = compression.decompress(outer.compression, outer.value, magic=outer.magic)
    inner: list[legacy.LegacyEntry] = []
    p = 0
    while len(data) - p >= 12:  # DataLogInputStream: a short tail ends the stream quietly
        (size,) = struct.unpack_from(">i", data, p + 8)
        if size < legacy.RECORD_OVERHEAD_V0:
            raise _Abort("Record size is less than the minimum record overhead (14)")
        if p + 12 + size > len(data):
            break
        inner.append(legacy.parse_entry(data, p, where=where))
        if inner[-1].compression is not CompressionType.NONE:
            raise _Abort("Inner messages must not be compressed")
        p += 12 + size
    if not inner:
        raise _Abort("Found invalid compressed record set with no inner records")
    shift = 0
    if outer.magic == 1 and outer.offset != 0:
        if outer.offset < inner[-1].offset:
            raise _Abort(f"Found invalid wrapper offset in compressed v1 message set, wrapper offset "
                         f"'{outer.offset}' is less than the last inner message offset '{inner[-1].offset}' "
                         "and it is not zero.")
        shift = outer.offset - inner[-1].offset
    log_append = outer.timestamp_type is TimestampType.LOG_APPEND_TIME
    return [(e.offset + shift if outer.magic == 1 else e.offset,
             -1 if e.magic == 0 else outer.timestamp if log_append else e.timestamp,
             e.key, e.value, e.crc, legacy.is_valid(data, e)) for e in inner]


# --- control records ------------------------------------------------------------------------------

def _control_text(key: bytes | None, value: bytes | None) -> str:
    kind = parse_control_type(key)
    if kind in (ControlType.ABORT, ControlType.COMMIT):
        return f" endTxnMarker: {ControlType(kind).name} coordinatorEpoch: {parse_end_txn_marker(value)}"
    if kind in _KRAFT_LABEL:
        return f" {_KRAFT_LABEL[kind]} {_kraft_json(kind, value or b'')}"
    name = ControlType(kind).name if kind in ControlType._value2member_map_ else "UNKNOWN"
    return f" controlType: {name}({kind})"


class _Reader:
    """Just enough of Kafka's flexible-version message reader for the KRaft control records."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        value = shift = 0
        while (byte := self.fixed(">B")) & 0x80:
            value |= (byte & 0x7F) << shift
            shift += 7
            if shift > 28:
                raise _Abort("varint is too long")
        return value | byte << shift

    def length(self, field: str) -> int:
        n = self.uvarint() - 1  # compact encoding: length + 1, 0 for null
        if n < 0:
            raise _Abort(f"non-nullable field {field} was serialized as null")
        return n

    def take(self, n: int) -> bytes:
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def tags(self) -> None:
        for _ in range(self.uvarint()):  # tagged fields none of these messages defines: skipped
            self.uvarint()
            self.take(self.uvarint())


def _kraft_json(kind: int, value: bytes) -> str:
    """The JSON of Kafka's generated ``*JsonConverter.write`` for the KRaft control records."""
    r = _Reader(value)
    doc: dict[str, Any] = {"version": r.fixed(">h")}
    if kind == ControlType.SNAPSHOT_HEADER:
        doc["lastContainedLogTimestamp"] = r.fixed(">q")
    elif kind == ControlType.KRAFT_VERSION:
        doc["kRaftVersion"] = r.fixed(">h")
    elif kind == ControlType.KRAFT_VOTERS:
        doc["voters"] = []
        for _ in range(r.length("voters")):
            voter_id = r.fixed(">i")
            directory = base64.urlsafe_b64encode(r.take(16)).rstrip(b"=").decode()  # Uuid.toString
            endpoints = []
            for _ in range(r.length("endpoints")):
                name, host = (r.take(r.length(f)).decode("utf-8", "replace") for f in ("name", "host"))
                endpoints.append({"name": name, "host": host, "port": r.fixed(">H")})
                r.tags()
            feature = {"minSupportedVersion": r.fixed(">h"), "maxSupportedVersion": r.fixed(">h")}
            r.tags()  # of the feature struct, then of the voter
            r.tags()
            doc["voters"].append({"voterId": voter_id, "voterDirectoryId": directory, "endpoints": endpoints,
                                  "kRaftVersionFeature": feature})
    r.tags()
    if doc["version"] != 0:  # the converters only write version 0
        raise _Abort(f"Can't write version {doc['version']} of {_KRAFT_LABEL[kind]} record")
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


# --- .index and .timeindex ------------------------------------------------------------------------

def _dump_index(path: Path, opts: _Options, reports: _Reports, out: TextIO) -> None:
    base, log_path, _ = _siblings(path)
    arr, log_len = _read(log_path)  # Kafka opens the .log first: a missing one fails before anything
    entries, length = _read_index(path, _OFFSET_INDEX)
    if not len(entries):
        out.write(f"{path} is empty.\n")
        return
    offsets = (entries["offset"].astype(np.int64) + base).tolist()
    where = _absolute(path)
    if opts.index_sanity_check:
        _sanity(offsets[-1] >= base, f"Corrupt index found, index file {where} has non-zero size but the "
                f"last offset is {offsets[-1]} which is less than the base offset {base}")
        _sanity(length % 8 == 0, f"Index file {where} is corrupt, found {length} bytes which is neither "
                "positive nor a multiple of 8")
        out.write(f"{path} passed sanity check.\n")
        return
    lines: list[str] = []
    try:
        for i, (offset, position) in enumerate(zip(offsets, entries["position"].tolist(), strict=True)):
            if i > 0 and offset == base:  # a zero-filled preallocated slot: the real entries ended
                break
            _check_slice(position, opts.max_message_size, log_len, log_path)
            first = _first_last_offset(arr, position, min(position + opts.max_message_size, log_len),
                                       log_len, log_path)
            if first != offset:
                reports["index"].setdefault(where, []).append((offset, first))
            if not opts.verify_index_only:
                lines.append(f"offset: {offset} position: {position}")
    finally:
        if lines:
            out.write("\n".join(lines) + "\n")


def _dump_time_index(path: Path, opts: _Options, reports: _Reports, out: TextIO) -> None:
    base, log_path, index_path = _siblings(path)
    arr, log_len = _read(log_path)
    index, _ = _read_index(index_path, _OFFSET_INDEX)  # Kafka fails here too when it is missing
    entries, length = _read_index(path, _TIME_INDEX)
    stamps = entries["timestamp"].tolist()
    offsets = (entries["offset"].astype(np.int64) + base).tolist()
    where = _absolute(path)
    if opts.index_sanity_check:  # Kafka checks the last slot, zero-filled or not
        prefix = f"Corrupt time index found, time index file ({where}) has non-zero size but the last"
        if stamps:
            _sanity(stamps[-1] >= stamps[0], f"{prefix} timestamp is {stamps[-1]} which is less than the "
                    f"first timestamp {stamps[0]}")
            _sanity(offsets[-1] >= base, f"{prefix} offset is {offsets[-1]} which is less than the first "
                    f"offset {base}")
        _sanity(length % 12 == 0, f"Time index file {where} is corrupt, found {length} bytes which is "
                "neither positive nor a multiple of 12")
        out.write(f"{path} passed sanity check.\n")
        return
    index_offsets, index_positions = (index["offset"].astype(np.int64) + base).tolist(), index["position"].tolist()
    log = _LogWalker(arr, log_len, str(log_path))
    lines: list[str] = []
    previous = -1
    try:
        for i, (timestamp, offset) in enumerate(zip(stamps, offsets, strict=True)):
            if i > 0 and offset == base:
                break
            position = _lookup(index_offsets, index_positions, offset)
            _check_slice(position, MAX_INT, log_len, log_path)
            found = log.find(position, offset)
            if found is None or found[0] != offset:
                reports["missing"].setdefault(where, []).append((offset, -1 if found is None else found[0]))
            else:
                logged = log.max_timestamp(found[1])
                if logged != timestamp:
                    reports["time"].setdefault(where, []).append((timestamp, logged))
                if previous >= timestamp:
                    reports["order"].setdefault(where, []).append((timestamp, previous))
            if not opts.verify_index_only:
                lines.append(f"timestamp: {timestamp} offset: {offset}")
            previous = timestamp
    finally:
        if lines:
            out.write("\n".join(lines) + "\n")


class _LogWalker:
    """``fileRecords.slice(position).batches.find(_.lastOffset >= target)`` for every time-index entry,
    over one framing of the file instead of a walk per entry."""

    def __init__(self, arr: bytearray, file_len: int, where: str) -> None:
        self.arr, self.file_len, self.where = arr, file_len, where
        self.cols, self.error = _frame(arr, 0, file_len, file_len, where)

    def find(self, position: int, target: int) -> tuple[int, int] | None:
        """(last offset, row in ``cols``) of that batch, or None when the log ends first."""
        cols, error = self.cols, self.error
        k = int(np.searchsorted(cols.position, position))
        if k >= len(cols) or int(cols.position[k]) != position:  # not a batch boundary: frame from there
            cols, error = _frame(self.arr, position, self.file_len, self.file_len, self.where)
            k = 0
        hits = np.flatnonzero(cols.last_offset[k:] >= target)
        if not len(hits):
            if error is not None:
                raise _Abort(error)
            return None
        self.cols, self.error = cols, error
        return int(cols.last_offset[k + hits[0]]), k + int(hits[0])

    def max_timestamp(self, row: int) -> int:
        """The largest record timestamp of the batch, -1 without records (Kafka's NO_TIMESTAMP start)."""
        cols = _slice(self.cols, row, row + 1)
        if int(cols.magic[0]) < 2:
            return max([-1, *(ts for _, ts, *_ in _legacy_records(memoryview(self.arr), int(cols.position[0]),
                                                                  self.where))])
        if int(cols.records_count[0]) <= 0:
            return -1
        return max(-1, int(scan_records(self.arr, cols, f"{self.where}: ").timestamp.max()))


def _lookup(offsets: list[int], positions: list[int], target: int) -> int:
    """``OffsetIndex.lookup(target).position`` over every slot, zero-filled ones included, with Kafka's
    warm-section-first binary search (on unsorted slots its answer is not a plain search's)."""
    n = len(offsets)
    first_hot = max(0, n - 1 - 1024)
    if not n or (offsets[first_hot] >= target and offsets[0] > target):
        return 0
    lo, hi = (first_hot, n - 1) if offsets[first_hot] < target else (0, first_hot)
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if offsets[mid] > target:
            hi = mid - 1
        elif offsets[mid] < target:
            lo = mid
        else:
            return positions[mid]
    return positions[lo]


def _first_last_offset(arr: bytearray, pos: int, end: int, file_len: int, log: Path) -> int:
    """Last offset of the first batch of ``slice(pos, end)`` (``batches.iterator.next().lastOffset``)."""
    if pos < end - 17:
        offset, length = struct.unpack_from(">qi", arr, pos)
        if length < 14:
            raise _Abort(f"Found record size {length} smaller than minimum record overhead (14) in file {log}.")
        if pos <= end - 12 - length:
            if struct.unpack_from(">b", arr, pos + 16)[0] < 2:
                return int(offset)  # a legacy entry's offset is its last offset
            if pos + _HEADER > file_len:
                raise _Abort(f"Failed to load record batch at position {pos} from {log}")
            return int(offset) + int(struct.unpack_from(">i", arr, pos + 23)[0])
    raise _Abort(f"no complete batch at position {pos} of {log} within --max-message-size "
                 "(Kafka fails with NoSuchElementException)")


def _check_slice(position: int, size: int, log_len: int, log: Path) -> None:
    """``FileRecords.slice`` argument checks, with its messages."""
    if position < 0:
        raise _Abort(f"Invalid position: {position} in read from {log}")
    if position > log_len:
        raise _Abort(f"Slice from position {position} exceeds end position of {log} ({log_len} bytes)")
    if size < 0:
        raise _Abort(f"Invalid size: {size} in read from {log}")


def _sanity(ok: bool, message: str) -> None:
    if not ok:
        raise _Abort(message)


# --- .snapshot and .txnindex ----------------------------------------------------------------------

def _dump_producer_snapshot(path: Path, out: TextIO, err: TextIO) -> None:
    """``ProducerStateManager.readSnapshot``: its checks in its order and its messages, which Kafka prints
    to stderr before going on. Bytes after the last entry are ignored, as Kafka ignores them."""
    data = _read_bytes(path)
    schema_error = _snapshot_schema_error(data)
    if schema_error is not None:
        err.write(f"Snapshot failed schema validation: {schema_error}\n")
        return
    stored, computed = struct.unpack_from(">I", data, 2)[0], crc32c(data[6:])
    if stored != computed:
        err.write(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. Computed crc: {computed}\n")
        return
    count = struct.unpack_from(">i", data, 6)[0]
    entries = struct.Struct(">qhiqiqiq").iter_unpack(data[10:10 + 46 * count])
    out.writelines(format_snapshot_dump_line(ProducerSnapshotEntry(*fields)) + "\n" for fields in entries)


def _snapshot_schema_error(data: bytes) -> str | None:
    """The message of what Kafka's generated ``ProducerSnapshot`` reader throws on ``data``, if anything."""
    if len(data) < 2:
        return "null"  # a BufferUnderflowException has no message
    if (version := struct.unpack_from(">h", data)[0]) != 1:
        return f"Snapshot contained an unknown file version {version}"
    if len(data) < 10:
        return "null"
    if (count := struct.unpack_from(">i", data, 6)[0]) < 0:
        return "non-nullable field producerEntries was serialized as null"
    if count > len(data) - 10:
        return f"Tried to allocate a collection of size {count}, but there are only {len(data) - 10} bytes remaining."
    return "null" if len(data) < 10 + 46 * count else None


def _dump_txn_index(path: Path, out: TextIO) -> None:
    """``TransactionIndex.allAbortedTxns``: a missing file has none, a partial last entry is skipped."""
    _java_long(path.name.split(".")[0])
    data = _read_bytes(path) if path.exists() else b""
    for pos in range(0, len(data) - 33, 34):
        version = struct.unpack_from(">b", data, pos)[0]  # Kafka reads one byte of the int16
        if version > 0:
            raise _Abort(f"Unexpected aborted transaction version {version} in transaction index "
                         f"{_absolute(path)}, current version is 0")
        _, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
        out.write(format_dump_line(AbortedTxn(pid, first, last, lso, version)) + "\n")


# --- helpers --------------------------------------------------------------------------------------

def _frame(arr: bytearray, start: int, end: int, file_len: int, where: str) -> tuple[BatchColumns, str | None]:
    """The batches ``FileLogInputStream`` walks over ``[start, end)``, and the error it throws after
    them (a length field below 14, or a v2 header running past the end of the file)."""
    error = None
    try:
        cols = scan_batches(arr, start, end)
    except KafkaLogError:  # find the bad entry (rare) and keep the batches before it
        pos, length = start, 14
        while pos < end - 17:
            (length,) = struct.unpack_from(">i", arr, pos + 8)
            if length < 14 or pos > end - 12 - length:
                break
            pos += 12 + length
        error = f"Found record size {length} smaller than minimum record overhead (14) in file {where}."
        cols = scan_batches(arr, start, pos)
    torn = np.flatnonzero((cols.magic >= 2) & (cols.position + _HEADER > file_len))
    if len(torn):
        error = f"Failed to load record batch at position {int(cols.position[torn[0]])} from {where}"
        cols = _slice(cols, 0, int(torn[0]))
    return cols, error


def _slice(cols: BatchColumns, a: int, b: int) -> BatchColumns:
    valid_end = int(cols.position[b - 1] + cols.size[b - 1]) if b > a else cols.valid_end
    return BatchColumns(**{name: getattr(cols, name)[a:b] for name in _BATCH_FIELDS}, valid_end=valid_end)


def _check_regular(path: Path, mode: int | None) -> None:
    if mode is not None and not stat.S_ISREG(mode):
        raise KafkaLogError(f"{path}: not a regular file ({file_kind(mode)}); kafkalog dump reads only regular files")


def _read(path: Path) -> tuple[bytearray, int]:
    # O_NONBLOCK: a FIFO (given, or the sibling .log of an index) is refused at once, not waited on.
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
        info = os.fstat(f.fileno())
        _check_regular(path, info.st_mode)
        arr = bytearray(info.st_size + _PAD)
        return arr, f.readinto(memoryview(arr)[:info.st_size]) or 0


def _read_bytes(path: Path) -> bytes:
    arr, length = _read(path)
    return bytes(arr[:length])


def _read_index(path: Path, dtype: np.dtype[Any]) -> tuple[np.ndarray[Any, Any], int]:
    raw = _read_bytes(path)
    return np.frombuffer(raw[:len(raw) - len(raw) % dtype.itemsize], dtype=dtype), len(raw)


def _siblings(path: Path) -> tuple[int, Path, Path]:
    prefix = path.name.split(".")[0]
    parent = path.absolute().parent
    return _java_long(prefix), parent / f"{prefix}.log", parent / f"{prefix}.index"


def _java_long(text: str, bits: int = 64) -> int:
    """``Long.parseLong`` (``Integer.parseInt`` with bits=32), with Java's message on failure."""
    value = int(text) if _JAVA_LONG.fullmatch(text) else None
    if value is None or not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise _Abort(f'For input string: "{text}"')
    return value


def _increment_sequence(sequence: int, increment: int) -> int:
    """``DefaultRecordBatch.incrementSequence`` in Java int arithmetic, overflow included."""
    if sequence > _int32(MAX_INT - increment):
        return _int32(increment - _int32(MAX_INT - sequence) - 1)
    return _int32(sequence + increment)


def _int32(value: int) -> int:
    return (value + (1 << 31)) % (1 << 32) - (1 << 31)


def _codec_name(attributes: int) -> str:
    try:
        return CompressionType(attributes & 0x07).name_kafka
    except ValueError:
        raise _Abort(f"Unknown compression type id: {attributes & 0x07}") from None


def _absolute(path: Path) -> str:
    return str(path.absolute())  # Java's getAbsolutePath: no normalisation of ".."


def _size(blob: bytes | None) -> int:
    return -1 if blob is None else len(blob)


def _bool(flag: object) -> str:
    return "true" if flag else "false"
