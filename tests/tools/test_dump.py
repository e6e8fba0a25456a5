"""kafkalog.tools.dump against kafka-dump-log's output.

Golden lines are written by hand from ``DumpLogSegments.scala`` (apache/kafka 1eb7644, spec §14): the
field order and labels of ``printBatchLevel``, the record line with ``sequence:``/``headerKeys:``, the
legacy ``isValid: … crc: …}`` (stray brace included), control-record suffixes and the stderr reports.
Only the CRC and size values are taken from the bytes under test (they describe the bytes, not the
dump). The Kafka-written fixtures are dumped in full and counted against kafka-python's parser.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from conftest import kafka_fixtures_root

from kafkalog.errors import KafkaLogError
from kafkalog.format import compression
from kafkalog.format.batch import (
    ControlType,
    Record,
    TimestampType,
    build_batch,
    end_txn_marker_batch,
)
from kafkalog.format.compression import CompressionType
from kafkalog.format.scan import BatchColumns, RecordColumns, scan_records
from kafkalog.log.producer_snapshot import ProducerSnapshotEntry, encode_producer_snapshot
from kafkalog.log.txn_index import AbortedTxn
from kafkalog.tools.dump import dump_files

MAX_INT = 2**31 - 1


def run(*paths: Path, **options: object) -> tuple[int, list[str], list[str]]:
    out, err = io.StringIO(), io.StringIO()
    code = dump_files(list(paths), out=out, err=err, **options)  # type: ignore[arg-type]
    return code, out.getvalue().splitlines(), err.getvalue().splitlines()


def crc_of(batch: bytes) -> int:
    return int(struct.unpack_from(">I", batch, 17)[0])


def batch_line(batch: bytes, position: int, *, count: int, base_seq: int = -1, last_seq: int = -1,
               pid: int = -1, epoch: int = -1, leader_epoch: int = -1, txn: bool = False,
               control: bool = False, horizon: str = "OptionalLong.empty", ts_type: str = "CreateTime",
               codec: str = "none") -> str:
    base, delta, max_ts = struct.unpack_from(">q", batch)[0], *struct.unpack_from(">i", batch, 23), \
        struct.unpack_from(">q", batch, 35)[0]
    return (f"baseOffset: {base} lastOffset: {base + delta} count: {count} baseSequence: {base_seq} "
            f"lastSequence: {last_seq} producerId: {pid} producerEpoch: {epoch} partitionLeaderEpoch: "
            f"{leader_epoch} isTransactional: {str(txn).lower()} isControl: {str(control).lower()} "
            f"deleteHorizonMs: {horizon} position: {position} {ts_type}: {max_ts} size: {len(batch)} "
            f"magic: 2 compresscodec: {codec} crc: {crc_of(batch)} isvalid: true")


def write_log(directory: Path, base_offset: int, *batches: bytes) -> Path:
    path = directory / f"{base_offset:020d}.log"
    path.write_bytes(b"".join(batches))
    return path


# --- v2 batches -------------------------------------------------------------------------------------

def test_v2_batch_records_headers_nulls_and_data(tmp_path: Path) -> None:
    batch = build_batch(
        [Record(10, 1000, b"k0", b"v0", (("h1", b"x"), ("h2", None))),
         Record(11, 1005, None, b"v1"),
         Record(12, 1002, b"k2", None)],
        producer_id=5, producer_epoch=1, base_sequence=100, partition_leader_epoch=3)
    log = write_log(tmp_path, 10, batch)
    code, out, err = run(log, print_data_log=True)
    assert code == 0 and err == []
    assert out == [
        f"Dumping {log}",
        "Log starting offset: 10",
        batch_line(batch, 0, count=3, base_seq=100, last_seq=102, pid=5, epoch=1, leader_epoch=3),
        "| offset: 10 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: 100 headerKeys: [h1,h2] key: k0 payload: v0",
        "| offset: 11 CreateTime: 1005 keySize: -1 valueSize: 2 sequence: 101 headerKeys: [] payload: v1",
        "| offset: 12 CreateTime: 1002 keySize: 2 valueSize: -1 sequence: 102 headerKeys: [] key: k2",
    ]
    # Shallow: the batch line only. Deep without --print-data-log: no key/payload.
    assert run(log)[1] == out[:3]
    assert run(log, deep_iteration=True)[1][3] == (
        "| offset: 10 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: 100 headerKeys: [h1,h2]")


def test_skip_record_metadata_prefixes_like_kafka(tmp_path: Path) -> None:
    log = write_log(tmp_path, 0, build_batch([Record(0, 1, b"k", b"v"), Record(1, 2, None, b"w")]))
    lines = run(log, print_data_log=True, skip_record_metadata=True)[1]
    # The "| " prefix goes on the key; a record without a key starts with " payload:" (sic).
    assert lines[3:] == ["| key: k payload: v", " payload: w"]


def test_sequence_wraps_at_max_int(tmp_path: Path) -> None:
    batch = build_batch([Record(i, 5, b"k", b"v") for i in range(3)], producer_id=1, producer_epoch=0,
                        base_sequence=MAX_INT - 1)
    lines = run(write_log(tmp_path, 0, batch), deep_iteration=True)[1]
    assert lines[2] == batch_line(batch, 0, count=3, base_seq=MAX_INT - 1, last_seq=0, pid=1, epoch=0)
    assert [line.split(" sequence: ")[1] for line in lines[3:]] == [
        f"{MAX_INT - 1} headerKeys: []", f"{MAX_INT} headerKeys: []", "0 headerKeys: []"]


def test_transactions_with_commit_and_abort_markers(tmp_path: Path) -> None:
    data = build_batch([Record(0, 1000, b"a", b"1"), Record(1, 1001, b"b", b"2")], producer_id=9,
                       producer_epoch=2, base_sequence=0, is_transactional=True)
    commit = end_txn_marker_batch(ControlType.COMMIT, offset=2, timestamp=2000, producer_id=9,
                                  producer_epoch=2, coordinator_epoch=7, partition_leader_epoch=4)
    abort = end_txn_marker_batch(ControlType.ABORT, offset=3, timestamp=2001, producer_id=9,
                                 producer_epoch=3, coordinator_epoch=8)
    log = write_log(tmp_path, 0, data, commit, abort)
    code, out, err = run(log, print_data_log=True)
    assert code == 0 and err == []
    p1, p2 = len(data), len(data) + len(commit)
    assert len(commit) == len(abort) == 78
    assert out[2:] == [
        batch_line(data, 0, count=2, base_seq=0, last_seq=1, pid=9, epoch=2, txn=True),
        "| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 1 sequence: 0 headerKeys: [] key: a payload: 1",
        "| offset: 1 CreateTime: 1001 keySize: 1 valueSize: 1 sequence: 1 headerKeys: [] key: b payload: 2",
        batch_line(commit, p1, count=1, pid=9, epoch=2, leader_epoch=4, txn=True, control=True),
        # Control records never print key/payload, even with --print-data-log.
        "| offset: 2 CreateTime: 2000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 7",
        batch_line(abort, p2, count=1, pid=9, epoch=3, txn=True, control=True),
        "| offset: 3 CreateTime: 2001 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: ABORT coordinatorEpoch: 8",
    ]


def test_log_append_time_reports_the_append_time_for_every_record(tmp_path: Path) -> None:
    batch = build_batch([Record(0, 1, b"k", b"v"), Record(1, 2, b"k", b"w")],
                        timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=5000)
    lines = run(write_log(tmp_path, 0, batch), deep_iteration=True)[1]
    assert lines[2:] == [
        batch_line(batch, 0, count=2, ts_type="LogAppendTime"),
        "| offset: 0 LogAppendTime: 5000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: []",
        "| offset: 1 LogAppendTime: 5000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: []",
    ]


def test_delete_horizon(tmp_path: Path) -> None:
    batch = build_batch([Record(0, 1000, b"k", None), Record(1, 1001, b"j", None)], delete_horizon_ms=9000)
    lines = run(write_log(tmp_path, 0, batch), deep_iteration=True)[1]
    assert lines[2:] == [
        batch_line(batch, 0, count=2, horizon="OptionalLong[9000]"),
        "| offset: 0 CreateTime: 1000 keySize: 1 valueSize: -1 sequence: -1 headerKeys: []",
        "| offset: 1 CreateTime: 1001 keySize: 1 valueSize: -1 sequence: -1 headerKeys: []",
    ]


@pytest.mark.parametrize("codec", [c for c in CompressionType if c is not CompressionType.NONE])
def test_every_codec(tmp_path: Path, codec: CompressionType) -> None:
    batch = build_batch([Record(i, 100 + i, b"key%d" % i, b"value %d " % i * 20) for i in range(5)],
                        compression_type=codec)
    lines = run(write_log(tmp_path, 0, batch), print_data_log=True)[1]
    assert lines[2] == batch_line(batch, 0, count=5, codec=codec.name.lower())
    assert lines[3] == ("| offset: 0 CreateTime: 100 keySize: 4 valueSize: 160 sequence: -1 headerKeys: [] "
                        f"key: key0 payload: {'value 0 ' * 20}")
    assert len(lines) == 8


def test_crc_failure_is_reported_and_records_still_print(tmp_path: Path) -> None:
    batch = bytearray(build_batch([Record(0, 1, b"k", b"v")]))
    batch[-2] ^= 0xFF  # the value byte: a valid structure with a wrong CRC
    lines = run(write_log(tmp_path, 0, bytes(batch)), deep_iteration=True)[1]
    assert lines[2].endswith(f"crc: {crc_of(bytes(batch))} isvalid: false")
    assert lines[3] == "| offset: 0 CreateTime: 1 keySize: 1 valueSize: 1 sequence: -1 headerKeys: []"
    # The value length byte turned into a 2-byte negative varint: Kafka reads any negative length as
    # null (Utils.readBytes) and reports -1; the record still parses because its size is unchanged.
    batch[-3:-1] = b"\xfdv"
    lines = run(write_log(tmp_path, 0, bytes(batch)), deep_iteration=True)[1]
    assert lines[3] == "| offset: 0 CreateTime: 1 keySize: 1 valueSize: -1 sequence: -1 headerKeys: []"


def test_non_consecutive_offsets_go_to_stderr_newest_first(tmp_path: Path) -> None:
    batches = [build_batch([Record(o, 1, b"k", b"v") for o in offsets]) for offsets in ([0, 1], [5, 6], [10])]
    log = write_log(tmp_path, 0, *batches)
    code, _, err = run(log, deep_iteration=True)
    assert code == 0
    assert err == [f"Non-consecutive offsets in {log.absolute()}", "  6 is followed by 10", "  1 is followed by 5"]
    assert run(log)[2] == []  # only deep iteration looks at record offsets


def test_trailing_bytes_and_max_bytes(tmp_path: Path) -> None:
    first, second = build_batch([Record(0, 1, b"k", b"v")]), build_batch([Record(1, 2, b"k", b"v")])
    log = write_log(tmp_path, 0, first, second, second[:30])  # a torn last batch
    lines = run(log)[1]
    assert lines[-1] == f"Found 30 invalid bytes at the end of {log.name}"
    assert len(lines) == 5
    # --max-bytes cuts the read (a batch cut in half is not printed) and silences the trailing report.
    assert run(log, max_bytes=len(first) + 10)[1] == lines[:3]


def test_corrupt_length_stops_the_dump_like_kafkas_exception(tmp_path: Path) -> None:
    first = build_batch([Record(0, 1, b"k", b"v")])
    log = write_log(tmp_path, 0, first, struct.pack(">qi", 1, 3) + bytes(20), first)
    (tmp_path / "00000000000000000009.log").write_bytes(first)
    code, out, err = run(log, tmp_path / "00000000000000000009.log")
    assert code == 1
    assert out == [f"Dumping {log}", "Log starting offset: 0", batch_line(first, 0, count=1)]
    assert err == [f"Error dumping {log}: Found record size 3 smaller than minimum record overhead (14) "
                   f"in file {log}."]


def test_v2_entry_shorter_than_a_header_prints_the_bytes_kafka_reads(tmp_path: Path) -> None:
    tiny = struct.pack(">qiib", 5, 14, 0, 2) + bytes(9)  # a 26-byte "v2 batch": length 14, magic 2
    after = build_batch([Record(6, 77, b"k", b"v")])
    log = write_log(tmp_path, 5, tiny, after)
    code, out, err = run(log)
    # Kafka loads 61 header bytes whatever the entry's size, so its header runs 35 bytes into the next
    # batch; the size check makes it invalid.
    _, _, _, _, crc, attrs, delta, _, max_ts, pid, epoch, base_seq, count = struct.unpack_from(
        ">qiibIhiqqqhii", tiny + after)
    assert (attrs, delta, base_seq) == (0, 0, 0)  # what the bytes give here
    assert code == 0 and err == []
    assert out[2:] == [
        f"baseOffset: 5 lastOffset: 5 count: {count} baseSequence: 0 lastSequence: 0 producerId: {pid} "
        f"producerEpoch: {epoch} partitionLeaderEpoch: 0 "
        f"isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 "
        f"CreateTime: {max_ts} size: 26 magic: 2 compresscodec: none crc: {crc} isvalid: false",
        batch_line(after, 26, count=1),
    ]
    assert run(log, deep_iteration=True)[0] == 1  # Kafka's record iterator throws on it


def test_columnar_and_per_batch_paths_print_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batches = []
    for b in range(5000):  # more than one 4096-batch chunk
        records = [Record(b * 3 + i, 1000 + b, b"k%d" % b, b"v", (("h", b"1"),) if i == 1 else ())
                   for i in range(3)]
        batches.append(build_batch(records, producer_id=1, producer_epoch=0, base_sequence=b * 3,
                                   compression_type=CompressionType.LZ4 if b % 7 == 0 else CompressionType.NONE))
    log = write_log(tmp_path, 0, *batches)
    fast = run(log, print_data_log=True)

    real = scan_records

    def whole_chunks_fail(arr: bytearray, cols: BatchColumns, where: str = "") -> RecordColumns:
        if len(cols) > 1:
            raise KafkaLogError("forced")
        return real(arr, cols, where)

    monkeypatch.setattr("kafkalog.tools.dump.scan_records", whole_chunks_fail)
    slow = run(log, print_data_log=True)
    assert fast == slow
    assert len(fast[1]) == 2 + 5000 * 4


# --- KRaft control records and .checkpoint snapshots -----------------------------------------------

VOTERS_VALUE = bytes.fromhex(
    "00000200000001c98b8cac5455415497d155503dc312ac020b434f4e54524f4c4c45520a6c6f63616c686f737423850000000001000000")


def control_batch(base: int, *pairs: tuple[int, bytes]) -> bytes:
    return build_batch([Record(base + i, 77, struct.pack(">hh", 0, kind), value) for i, (kind, value) in
                        enumerate(pairs)], is_control=True, partition_leader_epoch=1)


def test_kraft_control_records_and_snapshot_names(tmp_path: Path) -> None:
    batch = control_batch(
        100,
        (3, bytes.fromhex("0000" "00000000000004d2" "00")),  # SnapshotHeader, timestamp 1234
        (5, bytes.fromhex("0000" "0001" "00")),  # KRaftVersion 1
        (6, VOTERS_VALUE),  # as the rupia-transaction-service fixture holds it
        (2, bytes.fromhex("00000000000102000000010002000000010000")),  # LeaderChange: no JSON in Kafka
        (9, b""),  # a type this Kafka does not know
        (4, bytes.fromhex("000000")),  # SnapshotFooter
    )
    snapshot = tmp_path / "00000000000000000100-0000000003.checkpoint"
    snapshot.write_bytes(batch)
    code, out, err = run(snapshot, print_data_log=True)
    assert code == 0 and err == []
    prefix = "CreateTime: 77 keySize: 4 valueSize: {} sequence: -1 headerKeys: []"
    assert out == [
        f"Dumping {snapshot}",
        "Snapshot end offset: 100, epoch: 3",
        batch_line(batch, 0, count=6, leader_epoch=1, control=True),
        "| offset: 100 " + prefix.format(11) + ' SnapshotHeader {"version":0,"lastContainedLogTimestamp":1234}',
        "| offset: 101 " + prefix.format(5) + ' KRaftVersion {"version":0,"kRaftVersion":1}',
        "| offset: 102 " + prefix.format(55) + ' KRaftVoters {"version":0,"voters":[{"voterId":1,'
        '"voterDirectoryId":"yYuMrFRVQVSX0VVQPcMSrA","endpoints":[{"name":"CONTROLLER","host":"localhost",'
        '"port":9093}],"kRaftVersionFeature":{"minSupportedVersion":0,"maxSupportedVersion":1}}]}',
        "| offset: 103 " + prefix.format(19) + " controlType: LEADER_CHANGE(2)",
        "| offset: 104 " + prefix.format(0) + " controlType: UNKNOWN(9)",
        "| offset: 105 " + prefix.format(3) + ' SnapshotFooter {"version":0}',
    ]
    bootstrap = tmp_path / "bootstrap.checkpoint"
    bootstrap.write_bytes(batch)
    assert run(bootstrap)[1][:3] == [f"Dumping {bootstrap}", "KRaft bootstrap snapshot", out[2]]


# --- legacy v0/v1 ------------------------------------------------------------------------------------

def legacy_entry(offset: int, magic: int, key: bytes | None, value: bytes | None, timestamp: int = 0,
                 attributes: int = 0) -> bytes:
    body = bytes([magic, attributes]) + (struct.pack(">q", timestamp) if magic == 1 else b"")
    for blob in (key, value):
        body += struct.pack(">i", -1) if blob is None else struct.pack(">i", len(blob)) + blob
    record = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(record)) + record


def legacy_crc(entry: bytes) -> int:
    return int(struct.unpack_from(">I", entry, 12)[0])


def test_legacy_helper_matches_kafkas_checksum_vectors() -> None:
    # MemoryRecordsTest.testChecksum's first record (spec §1.9).
    assert legacy_crc(legacy_entry(0, 0, b"key1", b"value1")) == 1978725405
    assert legacy_crc(legacy_entry(0, 1, b"key1", b"value1", 283843)) == 109425508


def test_legacy_v1_plain_and_gzip_wrapper(tmp_path: Path) -> None:
    plain = legacy_entry(0, 1, b"a", b"b", 1234)
    inner = [legacy_entry(0, 1, b"k1", b"x", 2000), legacy_entry(1, 1, None, b"y", 2001)]
    wrapper = legacy_entry(2, 1, None, compression.compress(CompressionType.GZIP, b"".join(inner), magic=1),
                           2001, attributes=1)
    appended = legacy_entry(4, 1, None, compression.compress(CompressionType.GZIP, b"".join(inner), magic=1),
                            9999, attributes=1 | 8)  # LogAppendTime: inner records report 9999
    log = write_log(tmp_path, 0, plain, wrapper, appended)
    code, out, err = run(log, print_data_log=True)
    p1, p2 = len(plain), len(plain) + len(wrapper)
    c0, c1 = legacy_crc(inner[0]), legacy_crc(inner[1])
    assert code == 0 and err == []
    assert out[2:] == [
        f"offset: 0 position: 0 CreateTime: 1234 size: {len(plain)} magic: 1 compresscodec: none "
        f"crc: {legacy_crc(plain)} isvalid: true",
        f"| offset: 0 CreateTime: 1234 keySize: 1 valueSize: 1 isValid: true crc: {legacy_crc(plain)}}} "
        "key: a payload: b",
        f"offset: 2 position: {p1} CreateTime: 2001 size: {len(wrapper)} magic: 1 compresscodec: gzip "
        f"crc: {legacy_crc(wrapper)} isvalid: true",
        f"| offset: 1 CreateTime: 2000 keySize: 2 valueSize: 1 isValid: true crc: {c0}}} key: k1 payload: x",
        f"| offset: 2 CreateTime: 2001 keySize: -1 valueSize: 1 isValid: true crc: {c1}}} payload: y",
        f"offset: 4 position: {p2} LogAppendTime: 9999 size: {len(appended)} magic: 1 compresscodec: gzip "
        f"crc: {legacy_crc(appended)} isvalid: true",
        f"| offset: 3 LogAppendTime: 9999 keySize: 2 valueSize: 1 isValid: true crc: {c0}}} key: k1 payload: x",
        f"| offset: 4 LogAppendTime: 9999 keySize: -1 valueSize: 1 isValid: true crc: {c1}}} payload: y",
    ]


def test_legacy_v0_has_no_timestamp(tmp_path: Path) -> None:
    entry = bytearray(legacy_entry(7, 0, b"key1", b"value1"))
    entry[-1] ^= 1  # break the CRC: both lines say so
    log = write_log(tmp_path, 7, bytes(entry))
    lines = run(log, deep_iteration=True)[1]
    crc = legacy_crc(bytes(entry))
    assert lines[2:] == [
        f"offset: 7 position: 0 NoTimestampType: -1 size: {len(entry)} magic: 0 compresscodec: none "
        f"crc: {crc} isvalid: false",
        f"| offset: 7 NoTimestampType: -1 keySize: 4 valueSize: 6 isValid: false crc: {crc}}}",
    ]


# --- .index and .timeindex ---------------------------------------------------------------------------

def three_batch_segment(tmp_path: Path) -> tuple[Path, list[bytes], list[int]]:
    batches = [build_batch([Record(o, ts, b"k", b"v") for o, ts in records]) for records in
               ([(100, 10), (101, 30)], [(102, 20), (103, 25)], [(104, 40)])]
    positions = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    return write_log(tmp_path, 100, *batches), batches, positions


def test_offset_index_dump_mismatches_and_zero_slots(tmp_path: Path) -> None:
    log, _, pos = three_batch_segment(tmp_path)
    index = log.with_suffix(".index")
    # Correct, wrong offset (103 is not the last offset of the batch at pos[2]), correct, then 3 zero slots.
    entries = [(101, pos[0]), (102, pos[2]), (103, pos[1]), (0, 0), (0, 0), (0, 0)]
    index.write_bytes(b"".join(struct.pack(">ii", o - 100 if o else 0, p) for o, p in entries))
    code, out, err = run(index)
    assert code == 0
    assert out == [f"Dumping {index}", f"offset: 101 position: {pos[0]}", f"offset: 102 position: {pos[2]}",
                   f"offset: 103 position: {pos[1]}"]
    assert err == [f"Mismatches in :{index.absolute()}", "  Index offset: 102, log offset: 104"]
    assert run(index, verify_index_only=True)[1:] == ([f"Dumping {index}"], err)
    assert run(index, index_sanity_check=True) == (0, [f"Dumping {index}", f"{index} passed sanity check."], [])


def test_offset_index_empty_and_failed_sanity_check(tmp_path: Path) -> None:
    log, _, _ = three_batch_segment(tmp_path)
    index = log.with_suffix(".index")
    index.write_bytes(b"\x00" * 5)  # no whole entry: "empty" comes before any sanity check
    assert run(index, index_sanity_check=True) == (0, [f"Dumping {index}", f"{index} is empty."], [])
    index.write_bytes(struct.pack(">ii", 1, 0) + b"\x00" * 4)
    code, _, err = run(index, index_sanity_check=True)
    assert code == 1
    assert err == [f"Error dumping {index}: Index file {index.absolute()} is corrupt, found 12 bytes which "
                   "is neither positive nor a multiple of 8"]
    index.write_bytes(struct.pack(">ii", -5, 0))
    assert "which is less than the base offset 100" in run(index, index_sanity_check=True)[2][0]


def test_index_without_its_log_fails_like_kafka(tmp_path: Path) -> None:
    index = tmp_path / "00000000000000000000.index"
    index.write_bytes(b"")
    code, out, err = run(index)
    assert (code, out) == (1, [f"Dumping {index}"])
    assert err[0].startswith(f"Error dumping {index}: ") and "00000000000000000000.log" in err[0]
    assert not (tmp_path / "00000000000000000000.log").exists()  # nothing created, unlike Kafka's index


def test_time_index_dump_and_its_three_reports(tmp_path: Path) -> None:
    log, _, pos = three_batch_segment(tmp_path)
    log.with_suffix(".index").write_bytes(struct.pack(">ii", 3, pos[1]))
    time_index = log.with_suffix(".timeindex")
    entries = [
        (30, 101),  # right: batch 1 ends at 101, its max timestamp is 30
        (26, 103),  # batch 2's max is 25: mismatch; and 26 <= 30: out of order
        (40, 102),  # 102 is inside batch 2: not found, the batch found ends at 103
        (50, 104),  # mismatch (40)
        (0, 100),  # a zero-filled slot: the dump stops here
        (99, 104),
    ]
    time_index.write_bytes(b"".join(struct.pack(">qi", t, o - 100) for t, o in entries))
    code, out, err = run(time_index)
    assert code == 0
    assert out == [f"Dumping {time_index}"] + [f"timestamp: {t} offset: {o}" for t, o in entries[:4]]
    where = time_index.absolute()
    assert err == [
        f"Found timestamp mismatch in :{where}",
        "  Index timestamp: 26, log timestamp: 25",
        "  Index timestamp: 50, log timestamp: 40",
        f"Found out of order timestamp in :{where}",
        "  Index timestamp: 26, Previously indexed timestamp: 30",
        "The following indexed offsets are not found in the log.",
        "Indexed offset: 102, found log offset: 103",
    ]
    assert run(time_index, verify_index_only=True)[1:] == ([f"Dumping {time_index}"], err)
    # Kafka's sanity check reads the last slot, zero-filled or not: 99 >= 30 passes.
    assert run(time_index, index_sanity_check=True)[1][1] == f"{time_index} passed sanity check."
    time_index.write_bytes(time_index.read_bytes()[:-12])  # now the last slot is the zero one
    code, _, err = run(time_index, index_sanity_check=True)
    assert code == 1 and "the last timestamp is 0 which is less than the first timestamp 30" in err[0]


def test_time_index_lookups_through_a_preallocated_offset_index(tmp_path: Path) -> None:
    """Kafka searches every slot of the offset index, zeros included; its warm-section search then lands
    on a zero slot (position 0) and the scan from there still finds each batch."""
    log, _, pos = three_batch_segment(tmp_path)
    log.with_suffix(".index").write_bytes(struct.pack(">ii", 3, pos[1]) + bytes(8 * 2000))
    time_index = log.with_suffix(".timeindex")
    time_index.write_bytes(b"".join(struct.pack(">qi", t, o - 100) for t, o in ((30, 101), (40, 104))) + bytes(120))
    assert run(time_index) == (0, [f"Dumping {time_index}", "timestamp: 30 offset: 101",
                                   "timestamp: 40 offset: 104"], [])
    assert run(log.with_suffix(".index"))[1] == [f"Dumping {log.with_suffix('.index')}",
                                                 f"offset: 103 position: {pos[1]}"]


# --- .txnindex, .snapshot, unknown files ----------------------------------------------------------------

def test_txn_index_skips_a_partial_tail(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(AbortedTxn(9, 0, 3, 4).encode() + AbortedTxn(11, 5, 8, 6).encode() + b"\x00" * 10)
    assert run(path) == (0, [f"Dumping {path}",
                             "version: 0 producerId: 9 firstOffset: 0 lastOffset: 3 lastStableOffset: 4",
                             "version: 0 producerId: 11 firstOffset: 5 lastOffset: 8 lastStableOffset: 6"], [])
    missing = tmp_path / "00000000000000000050.txnindex"
    assert run(missing) == (0, [f"Dumping {missing}"], [])


def test_producer_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000060.snapshot"
    path.write_bytes(encode_producer_snapshot([
        ProducerSnapshotEntry(1000, 2, 9, 50, 4, 7000, -1, -1),
        ProducerSnapshotEntry(1001, 0, -1, -1, 0, 8000, 3, 40),
    ]))
    assert run(path) == (0, [
        f"Dumping {path}",
        "producerId: 1000 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 7000 firstSequence: 5 lastSequence: 9 lastOffset: 50 offsetDelta: 4 timestamp: 7000",
        "producerId: 1001 producerEpoch: 0 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong[40] "
        "lastTimestamp: 8000 ",
    ], [])
    data = bytearray(path.read_bytes())
    stored = struct.unpack_from(">I", data, 2)[0]
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    code, out, err = run(path)
    computed = zlib_free_crc32c(bytes(data[6:]))
    assert (code, out) == (0, [f"Dumping {path}"])  # Kafka prints the error and goes on
    assert err == [f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. Computed crc: {computed}"]
    path.write_bytes(struct.pack(">h", 2) + bytes(data[2:]))
    assert run(path)[2] == ["Snapshot failed schema validation: Snapshot contained an unknown file version 2"]
    path.write_bytes(struct.pack(">hIi", 1, 0, 5))
    assert run(path)[2] == ["Snapshot failed schema validation: Tried to allocate a collection of size 5, "
                            "but there are only 0 bytes remaining."]
    path.write_bytes(struct.pack(">hIi", 1, 0, 1) + bytes(20))  # an entry cut short: BufferUnderflow
    assert run(path)[2] == ["Snapshot failed schema validation: null"]


def zlib_free_crc32c(data: bytes) -> int:
    import crc32c

    return int(crc32c.crc32c(data))


def test_unknown_files_are_ignored_and_reports_follow_every_file(tmp_path: Path) -> None:
    log = write_log(tmp_path, 0, *(build_batch([Record(o, 1, b"k", b"v")]) for o in (0, 2)))
    odd = tmp_path / "00000000000000000000.log.deleted"
    odd.write_bytes(b"")
    nodot = tmp_path / "leader-epoch-checkpoint"
    nodot.write_text("0\n0\n")
    code, out, err = run(log, odd, nodot, deep_iteration=True)
    assert code == 0
    assert out[-2:] == [f"Dumping {odd}", f"Dumping {nodot}"]
    assert err == [f"Ignoring unknown file {odd}", f"Ignoring unknown file {nodot}",
                   f"Non-consecutive offsets in {log.absolute()}", "  0 is followed by 2"]


# --- Kafka-written fixtures ---------------------------------------------------------------------------

def fixtures_root() -> Path:
    return kafka_fixtures_root()  # tests/conftest.py: skips, or fails on CI, when absent


def kafka_python_counts(data: bytes) -> tuple[int, int]:
    """(batches, records) by kafka-python's own parser (control records included, as Kafka's dump)."""
    from kafka.record import MemoryRecords

    records = MemoryRecords(data)
    batches = count = 0
    while (batch := records.next_batch()) is not None:
        batches += 1
        count += sum(1 for _ in batch)
    return batches, count


def test_every_fixture_log_dumps_one_line_per_batch_and_record() -> None:
    root = fixtures_root()
    logs = sorted(root.rglob("*.log"))
    assert len(logs) > 700
    legacy_records = 0
    for log in logs:
        code, out, err = run(log, deep_iteration=True)
        assert code == 0, (log, err)
        assert all(line.startswith("Non-consecutive offsets in ") or line.startswith("  ") for line in err), log
        body = out[2:]
        batch_lines = [line for line in body if line.startswith(("baseOffset: ", "offset: "))]
        record_lines = [line for line in body if line.startswith("| offset: ")]
        assert len(batch_lines) + len(record_lines) == len(body), log  # no torn tail in Kafka's files
        assert (len(batch_lines), len(record_lines)) == kafka_python_counts(log.read_bytes()), log
        if batch_lines and batch_lines[0].startswith("offset: "):
            assert all(" magic: 1 " in line and line.endswith("isvalid: true") for line in batch_lines)
            assert all(" isValid: true crc: " in line and line.endswith("}") for line in record_lines)
            legacy_records += len(record_lines)
        else:
            assert all(line.endswith("isvalid: true") for line in batch_lines), log
    assert legacy_records > 20_000  # bullShit's message format v1


def test_every_fixture_index_and_time_index_dumps() -> None:
    root = fixtures_root()
    listed = {line.strip() for line in (root / "INDEXES.md").read_text().splitlines()
              if line.startswith("    ") and line.strip().endswith(".log")}
    dumped = reports = 0
    for index in sorted([*root.rglob("*.index"), *root.rglob("*.timeindex")]):
        log, offset_index = index.with_suffix(".log"), index.with_suffix(".index")
        code, out, err = run(index)
        if not log.exists() or not offset_index.exists():  # Kafka's tool fails there too
            assert code == 1 and len(err) == 1, index
            continue
        assert code == 0, (index, err)
        dumped += 1
        reports += bool(err)
        if str(log.relative_to(root)) in listed:  # indexes equal to a recovery rebuild are exact
            assert err == [], index
        assert run(index, index_sanity_check=True)[0] == 0, index
    print(f"{dumped} Kafka-written index files dumped, {reports} with reports")
    assert dumped > 800
    # Old brokers (before KAFKA-16310) indexed record offsets in the time index: Kafka's own tool reports
    # those as "not found"; the count is what this data holds.
    assert reports < 30


def test_every_fixture_snapshot_and_checkpoint_dumps() -> None:
    root = fixtures_root()
    snapshots = sorted(root.rglob("*.snapshot"))
    for snapshot in snapshots:
        code, out, err = run(snapshot)
        assert (code, err) == (0, []), snapshot
        count = struct.unpack_from(">i", snapshot.read_bytes(), 6)[0]
        assert len(out) == 1 + count and all(line.startswith("producerId: ") for line in out[1:])
    checkpoints = sorted(root.rglob("*.checkpoint"))
    for checkpoint in checkpoints:
        code, out, err = run(checkpoint, deep_iteration=True)
        assert (code, err) == (0, []), checkpoint
        assert out[1].startswith(("Snapshot end offset: ", "KRaft bootstrap snapshot")), checkpoint
        assert " SnapshotHeader {" in out[3] and " SnapshotFooter {" in out[-1], checkpoint
    assert len(snapshots) > 100 and len(checkpoints) > 100
