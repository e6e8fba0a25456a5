"""End to end through the ``kafkalog`` CLI: produce/consume, interop of what it writes, bad input
refused with nothing changed, and recovery of damaged log dirs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _create(log_dir: Path, topic: str = "t", partitions: int = 1, *configs: str) -> None:
    args = ["topics", "create", "--log-dir", str(log_dir), "--topic", topic, "--partitions", str(partitions)]
    for config in configs:
        args += ["--config", config]
    result = run_cli(*args)
    assert result.code == 0, result.err


def _produce(log_dir: Path, lines: list[str], *extra: str, topic: str = "t") -> None:
    result = run_cli("produce", "--log-dir", str(log_dir), "--topic", topic, *extra, stdin="\n".join(lines) + "\n")
    assert result.code == 0, result.err


def _consume(log_dir: Path, *extra: str, topic: str = "t", partition: int = 0) -> list[str]:
    result = run_cli("consume", "--log-dir", str(log_dir), "--topic", topic, "--partition", str(partition), *extra)
    assert result.code == 0, result.err
    return result.out.splitlines()


def _segments(log_dir: Path, partition: str = "t-0") -> list[Path]:
    return sorted((log_dir / partition).glob("*.log"))


LINES = [f"k{i % 17}:value-{i}" for i in range(300)] + ["k1:__NULL__", "k2:"]


@pytest.mark.parametrize("codec", CODECS)
def test_produce_then_consume_every_codec(tmp_path: Path, codec: str) -> None:
    _create(tmp_path, "t", 1, "segment.bytes=1000")
    _produce(tmp_path, LINES, "--partition", "0", "--key-separator", ":", "--null-value", "__NULL__",
             "--compression", codec, "--batch-records", "20", "--timestamp-ms", "1700000000000")
    out = _consume(tmp_path, "--print-offset", "--print-timestamp", "--key-separator", "=")
    expected = [f"{i}\t1700000000000\t{line.split(':', 1)[0]}={line.split(':', 1)[1]}" for i, line in enumerate(LINES)]
    expected[-2] = "300\t1700000000000\tk1=null"
    assert out == expected
    assert len(_segments(tmp_path)) > 1  # segment.bytes=1000 rolled the log
    assert _consume(tmp_path, "--from-offset", "298", "--max-records", "2") == ["k9\tvalue-298", "k10\tvalue-299"]


@pytest.mark.parametrize("codec", CODECS)
def test_logs_written_by_produce_parse_with_kafka_python_and_aiokafka(tmp_path: Path, codec: str) -> None:
    from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
    from kafka.record import MemoryRecords

    _create(tmp_path)
    _produce(tmp_path, ["a:1", "b:__NULL__", "c:3", "plain-no-key"][:3], "--partition", "0", "--key-separator", ":",
             "--null-value", "__NULL__", "--compression", codec, "--batch-records", "2",
             "--timestamp-ms", "1700000000123")
    data = _segments(tmp_path)[0].read_bytes()
    seen = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        assert batch.compression_type == CODECS.index(codec)
        seen += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    expected = [(0, 1700000000123, b"a", b"1"), (1, 1700000000123, b"b", None), (2, 1700000000123, b"c", b"3")]
    assert seen == expected
    aio_seen = []
    aio = AioMemoryRecords(data)
    while (batch := aio.next_batch()) is not None:
        assert batch.validate_crc()
        aio_seen += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    assert aio_seen == expected


def test_keyed_records_go_where_kafkas_default_partitioner_sends_them(tmp_path: Path) -> None:
    from kafka.partitioner.default import murmur2

    _create(tmp_path, "t", 4)
    keys = [f"user-{i}" for i in range(40)]
    _produce(tmp_path, [f"{k}:v" for k in keys], "--key-separator", ":")
    for partition in range(4):
        got = {line.split("\t")[0] for line in _consume(tmp_path, partition=partition)}
        want = {k for k in keys if (murmur2(k.encode()) & 0x7FFFFFFF) % 4 == partition}  # kafka-python's own
        assert want
        assert got == want


# --- bad input is refused and changes nothing ---------------------------------------------------
def _flip(path: Path, position: int, value: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    data[position] = (data[position] ^ 0xFF) if value is None else value
    path.write_bytes(bytes(data))


@pytest.fixture
def written(tmp_path: Path) -> Path:
    _create(tmp_path, "t", 1)
    _produce(tmp_path, [f"k{i}:v{i}" for i in range(100)], "--partition", "0", "--key-separator", ":",
             "--batch-records", "10")
    return tmp_path


def _assert_refused(log_dir: Path, args: list[str], must_mention: list[str], stdin: str = "") -> str:
    before = tree_digest(log_dir)
    result = run_cli(*args, stdin=stdin)
    assert result.code != 0
    text = result.out + result.err
    for word in must_mention:
        assert word in text, text
    assert tree_digest(log_dir) == before
    return text


def test_flipped_crc_byte_is_reported_with_file_and_offset(written: Path) -> None:
    segment = _segments(written)[0]
    second_batch = 12 + struct.unpack_from(">i", segment.read_bytes(), 8)[0]
    _flip(segment, second_batch + 70)  # inside the second batch's records
    text = _assert_refused(written, ["verify", "--log-dir", str(written)],
                           [str(segment), f"byte {second_batch}", "offset 10", "crc"])
    assert "FAILED" in text
    _assert_refused(written, ["consume", "--log-dir", str(written), "--topic", "t", "--partition", "0"],
                    [str(segment), "crc"])


def test_bad_magic_is_reported(written: Path) -> None:
    segment = _segments(written)[0]
    _flip(segment, 16, 7)
    _assert_refused(written, ["verify", "--log-dir", str(written)], [str(segment), "invalid magic 7", "byte 0"])


def test_length_past_eof_is_reported(written: Path) -> None:
    segment = _segments(written)[0]
    data = segment.read_bytes()
    struct.pack_into(">i", data := bytearray(data), 8, 10_000_000)
    segment.write_bytes(bytes(data))
    _assert_refused(written, ["verify", "--log-dir", str(written)], [str(segment), "incomplete batch at byte 0"])


def test_garbage_file_in_partition_dir_is_refused(written: Path) -> None:
    (written / "t-0" / "notes.txt").write_text("hello")
    _assert_refused(written, ["verify", "--log-dir", str(written)], ["notes.txt", "unknown file"])
    _assert_refused(written, ["produce", "--log-dir", str(written), "--topic", "t", "--partition", "0"],
                    ["notes.txt"], stdin="x\n")


@pytest.mark.parametrize(("args", "words"), [
    (["topics", "create", "--topic", "bad/name"], ["bad/name"]),
    (["topics", "create", "--topic", ".."], ["'..'"]),
    (["topics", "create", "--topic", "x", "--config", "no.such.key=1"], ["no.such.key"]),
    (["topics", "create", "--topic", "x", "--config", "segment.bytes=-5"], ["segment.bytes", "-5"]),
    (["topics", "alter", "--topic", "t", "--config", "retention.ms=abc"], ["retention.ms", "abc"]),
    (["topics", "create", "--topic", "t"], ["already exists"]),
    (["produce", "--topic", "missing"], ["missing", "does not exist"]),
    (["consume", "--topic", "t", "--partition", "9"], ["t-9", "does not exist"]),
])
def test_bad_admin_input_is_refused(written: Path, args: list[str], words: list[str]) -> None:
    _assert_refused(written, [args[0], *args[1:2], "--log-dir", str(written), *args[2:]]
                    if args[0] == "topics" else [args[0], "--log-dir", str(written), *args[1:]], words)


def test_missing_log_dir_is_refused(tmp_path: Path) -> None:
    result = run_cli("verify", "--log-dir", str(tmp_path / "nope"))
    assert result.code == 1 and "does not exist" in result.err


# --- recovery ------------------------------------------------------------------------------------
def test_deleted_indexes_are_rebuilt_identically(tmp_path: Path) -> None:
    _create(tmp_path, "t", 1, "segment.bytes=20000", "index.interval.bytes=500")
    _produce(tmp_path, [f"k{i}:{'v' * 50}{i}" for i in range(1000)], "--partition", "0", "--key-separator", ":",
             "--batch-records", "5")
    indexes = sorted((tmp_path / "t-0").glob("*index"))
    assert len(indexes) > 4
    originals = {p: p.read_bytes() for p in indexes}
    assert any(len(b) for b in originals.values())
    for path in indexes:
        path.unlink()
    assert run_cli("recover", "--log-dir", str(tmp_path)).code == 0
    assert {p: p.read_bytes() for p in indexes} == originals
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0


def test_torn_last_batch_is_truncated_and_nothing_before_it_lost(tmp_path: Path) -> None:
    _create(tmp_path, "t", 1)
    _produce(tmp_path, [f"k{i}:v{i}" for i in range(95)], "--partition", "0", "--key-separator", ":",
             "--batch-records", "10")
    segment = _segments(tmp_path)[0]
    data = segment.read_bytes()
    last_batch = data.rfind(struct.pack(">q", 90))  # base offset of the last batch (offsets 90..94)
    segment.write_bytes(data[: last_batch + (len(data) - last_batch) // 2])
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 1
    result = run_cli("recover", "--log-dir", str(tmp_path))
    assert result.code == 0 and "truncated" in result.out
    assert segment.stat().st_size == last_batch
    assert _consume(tmp_path) == [f"k{i}\tv{i}" for i in range(90)]
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0
    _produce(tmp_path, ["k90:again"], "--partition", "0", "--key-separator", ":")
    assert _consume(tmp_path, "--from-offset", "89", "--print-offset") == ["89\tk89\tv89", "90\tk90\tagain"]


def test_a_corrupt_newest_producer_snapshot_is_reported_by_readers_and_deleted_by_recovery(tmp_path: Path) -> None:
    """Kafka's loader deletes a producer snapshot it cannot read and loads the one before it. Readers
    (verify, consume, dump) change nothing: verify names the file; a writable open (recover --full)
    deletes it, says so, and verify then passes."""
    _create(tmp_path, "t", 1, "segment.bytes=300")
    _produce(tmp_path, [f"v{i}" for i in range(40)], "--partition", "0", "--batch-records", "5")
    snapshots = sorted((tmp_path / "t-0").glob("*.snapshot"))
    assert [p.name[:20] for p in snapshots] == [f"{o:020d}" for o in (10, 20, 30)]
    newest = snapshots[-1]
    newest.write_bytes(b"\0\0" + newest.read_bytes()[2:])  # version 0
    before = tree_digest(tmp_path)
    verified = run_cli("verify", "--log-dir", str(tmp_path))
    assert verified.code == 1
    assert f"PROBLEM {newest}: unknown snapshot version 0 at byte 0, expected 1" in verified.out
    assert len(_consume(tmp_path)) == 40
    dumped = run_cli("dump", "--files", str(newest))  # kafka-dump-log's words and exit code
    assert (dumped.code, dumped.err) == (0, "Snapshot failed schema validation: Snapshot contained an unknown file "
                                            "version 0\n")
    assert tree_digest(tmp_path) == before
    recovered = json.loads(run_cli("recover", "--full", "--json", "--log-dir", str(tmp_path)).out)
    assert recovered["partitions"][0]["actions"] == [
        f"corrupt producer snapshot {newest.name} deleted ({newest}: unknown snapshot version 0 at byte 0, expected 1)"]
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot")) == [p.name for p in snapshots[:2]]
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0


def test_produce_refuses_to_cut_a_corrupt_batch_in_the_unflushed_tail(tmp_path: Path) -> None:
    _create(tmp_path, "t", 1)
    _produce(tmp_path, [f"k{i}:v{i}" for i in range(30)], "--partition", "0", "--key-separator", ":",
             "--batch-records", "10")
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 0\n")  # as after a crash
    segment = _segments(tmp_path)[0]
    _flip(segment, 12 + struct.unpack_from(">i", segment.read_bytes(), 8)[0] + 70)
    _assert_refused(tmp_path, ["produce", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0"],
                    [str(segment), "corrupt batch", "kafkalog recover"], stdin="x\n")


HOUR_MS = 3_600_000


@pytest.mark.parametrize(("configs", "offset_ms", "refused_by"), [
    # The deprecated difference.max.ms bounds a side whose own key is at its default (Kafka's LogConfig).
    (["message.timestamp.difference.max.ms=3600000"], -2 * HOUR_MS, "message.timestamp.difference.max.ms=3600000 "
                                                                      "ms before"),
    (["message.timestamp.difference.max.ms=3600000"], 2 * HOUR_MS, "message.timestamp.difference.max.ms=3600000 "
                                                                     "ms after"),
    (["message.timestamp.difference.max.ms=3600000", "message.timestamp.before.max.ms=10800000"], -2 * HOUR_MS,
     None),
    (["message.timestamp.difference.max.ms=3600000", "message.timestamp.before.max.ms=10800000"], -4 * HOUR_MS,
     "message.timestamp.before.max.ms=10800000 ms before"),
    (["message.timestamp.after.max.ms=60000"], 2 * HOUR_MS, "message.timestamp.after.max.ms=60000 ms after"),
    (["message.timestamp.difference.max.ms=3600000", "message.timestamp.type=LogAppendTime"], -2 * HOUR_MS, None)])
def test_produce_checks_create_time_against_the_keys_in_effect(tmp_path: Path, configs: list[str], offset_ms: int,
                                                              refused_by: str | None) -> None:
    import time

    _create(tmp_path, "t", 1, *configs)
    before = tree_digest(tmp_path)
    stamp = int(time.time() * 1000) + offset_ms
    done = run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--timestamp-ms", str(stamp), stdin="v\n")
    if refused_by is None:
        assert done.code == 0, done.err
        assert _consume(tmp_path) == ["null\tv"]
        return
    assert (done.code, done.err) == (1, f"kafkalog: error: --timestamp-ms {stamp} is outside the topic's accepted "
                                        f"range: more than {refused_by} now\n")
    assert tree_digest(tmp_path) == before



def test_a_topic_deleted_and_created_again_starts_at_offset_zero(tmp_path: Path) -> None:
    """Kafka's asyncDelete removes a deleted partition's checkpoint entries: the topic created again under
    the name does not inherit the log start offset (300) its predecessor's retention moved, and takes
    appends from offset 0 (with the entry left behind, produce refused: "the log start offset checkpoint
    says 300 but the log ends at 0")."""
    _create(tmp_path, "t", 1, "retention.ms=1000", "segment.bytes=4000")
    _produce(tmp_path, [f"v{i}" for i in range(300)], "--partition", "0", "--timestamp-ms", "1000")
    applied = run_cli("retention", "apply", "--log-dir", str(tmp_path), "--now-ms", "1700000000000")
    assert applied.code == 0, applied.err
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 300\n"
    deleted = run_cli("topics", "delete", "--log-dir", str(tmp_path), "--topic", "t")
    assert deleted.code == 0, deleted.err
    _create(tmp_path, "t")
    produced = run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", stdin="again\n")
    assert (produced.code, produced.err) == (0, "")
    assert _consume(tmp_path, "--print-offset") == ["0\tnull\tagain"]
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n0\n"
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 1\n"


# --- store: several log dirs, broker config file ---------------------------------------------------
def test_new_partitions_go_to_the_log_dir_with_the_fewest_logs(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("topics", "create", "--log-dir", str(a), "--log-dir", str(b), "--topic", "first",
                   "--partitions", "3").code == 0
    assert sorted(p.name for p in a.iterdir() if p.is_dir()) == ["first-0", "first-2"]
    assert sorted(p.name for p in b.iterdir() if p.is_dir()) == ["first-1"]
    assert run_cli("topics", "create", "--log-dir", str(a), "--log-dir", str(b), "--topic", "second").code == 0
    assert (b / "second-0").is_dir()  # b had fewer logs
    # Both dirs describe every topic, whichever one is read.
    for only in (a, b):
        described = run_cli("topics", "describe", "--log-dir", str(only), "--json")
        assert [t["topic"] for t in json.loads(described.out)["topics"]] == ["first", "second"]


def test_a_partition_in_two_log_dirs_is_refused_naming_both(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("topics", "create", "--log-dir", str(a), "--log-dir", str(b), "--topic", "t",
                   "--partitions", "2").code == 0
    (b / "t-0").mkdir()  # t-0 lives in a
    before = tree_digest(tmp_path)
    done = run_cli("status", "--log-dir", str(a), "--log-dir", str(b))
    assert done.code == 1 and f"partition t-0 is in two log dirs: {a / 't-0'} and {b / 't-0'}" in done.err, done.err
    assert tree_digest(tmp_path) == before


def test_broker_config_file_precedence_shows_in_describe(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("# broker\nlog.retention.hours=1\nlog.retention.minutes=5\nlog.segment.bytes=65536\n"
                      "broker.id=7\n")
    logs = tmp_path / "logs"
    assert run_cli("topics", "create", "--log-dir", str(logs), "--config-file", str(config), "--topic", "t",
                   "--config", "segment.bytes=4096").code == 0
    out = run_cli("topics", "describe", "--log-dir", str(logs), "--config-file", str(config), "--json")
    configs = {c["name"]: (c["value"], c["source"]) for c in json.loads(out.out)["topics"][0]["configs"]}
    assert configs["retention.ms"] == ("300000", "broker:log.retention.minutes")
    assert configs["segment.bytes"] == ("4096", "topic")
    assert configs["cleanup.policy"] == ("delete", "default")
    assert run_cli("topics", "alter", "--log-dir", str(logs), "--topic", "t", "--delete-config",
                   "segment.bytes").code == 0
    out = run_cli("topics", "describe", "--log-dir", str(logs), "--config-file", str(config), "--json")
    configs = {c["name"]: (c["value"], c["source"]) for c in json.loads(out.out)["topics"][0]["configs"]}
    assert configs["segment.bytes"] == ("65536", "broker:log.segment.bytes")


def test_bad_broker_config_value_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("log.segment.bytes=-1\n")
    result = run_cli("topics", "create", "--log-dir", str(tmp_path / "logs"), "--config-file", str(config),
                     "--topic", "t")
    assert result.code == 1 and "log.segment.bytes" in result.err
    assert not (tmp_path / "logs").exists()


def test_demo_writes_dumps_retains_compacts_and_verifies(tmp_path: Path) -> None:
    result = run_cli("demo", "--dir", str(tmp_path / "demo"))
    assert result.code == 0, result.err
    assert "compresscodec: lz4" in result.out
    assert "demo-changelog-0: cleaned [0, 850): 850 -> 100 records" in result.out
    assert "OK: 6 partitions" in result.out
    assert run_cli("verify", "--log-dir", str(tmp_path / "demo")).code == 0
    # A second run replaces its own demo dir, but never a directory it did not create.
    assert run_cli("demo", "--dir", str(tmp_path / "demo")).code == 0
    (tmp_path / "mine").mkdir()
    refused = run_cli("demo", "--dir", str(tmp_path / "mine"))
    assert refused.code == 1 and "not a kafkalog demo dir" in refused.err
