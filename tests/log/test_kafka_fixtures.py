"""Log dirs written by Apache Kafka brokers: open, verify, rebuild indexes, recover (in place or on
a temporary copy — the fixtures themselves are never written)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import kafka_data_dirs, kafka_fixtures_root, run_cli, tree_digest

from kafkalog.format.scan import scan_batches, scan_records
from kafkalog.log.segment import LogSegment
from kafkalog.log.store import LogStore
from kafkalog.tools.verify import verify_store


def _index_listed_segments() -> list[str]:
    text = (kafka_fixtures_root() / "INDEXES.md").read_text()
    return [line.strip() for line in text.splitlines() if line.startswith("    ") and line.strip().endswith(".log")]


def _fixture_ids() -> list[str]:
    try:
        return [d.name for d in kafka_data_dirs()]
    except BaseException:  # fixtures absent: one param that skips/fails with the reason inside
        return ["<fixtures>"]


@pytest.mark.parametrize("name", _fixture_ids())
def test_every_fixture_dir_opens_and_verifies_read_only(name: str) -> None:
    fixture = {d.name: d for d in kafka_data_dirs()}[name]
    before = tree_digest(fixture.data_dir)
    report = verify_store(LogStore([fixture.data_dir]))
    assert report.all_problems() == []
    assert report.partitions, "a Kafka data dir holds partitions"
    assert sum(p.records for p in report.partitions) > 0
    assert tree_digest(fixture.data_dir) == before  # verify changed nothing


def test_record_counts_match_kafka_python_on_every_segment(fixtures_root: Path) -> None:
    from kafka.record import MemoryRecords

    checked = 0
    for path in sorted(fixtures_root.rglob("*.log")):
        data = path.read_bytes()
        batches = scan_batches(data)
        ours = scan_records(data, batches)
        theirs = []
        records = MemoryRecords(data)
        while (batch := records.next_batch()) is not None:
            theirs += [r.offset for r in batch]
        assert list(ours.offset) == theirs, path
        checked += 1
    assert checked > 700


def test_rebuilt_indexes_are_byte_identical_to_kafkas(tmp_path: Path, fixtures_root: Path) -> None:
    listed = _index_listed_segments()
    assert len(listed) == 71
    for i, rel in enumerate(listed):
        source = fixtures_root / rel
        work = tmp_path / str(i) / source.parent.name
        work.mkdir(parents=True)
        shutil.copy(source, work / source.name)
        segment = LogSegment(work, int(source.name.split(".")[0]))
        assert segment.recover() == 0
        segment.close()
        for suffix in (".index", ".timeindex"):
            ours = (work / source.name).with_suffix(suffix).read_bytes()
            assert ours == source.with_suffix(suffix).read_bytes(), f"{rel} {suffix}"


MAX_LOOKUPS = 400  # per segment


def test_reads_through_kafka_indexes_equal_reads_through_rebuilt_ones(tmp_path: Path, fixtures_root: Path) -> None:
    compared = 0
    for index in sorted(fixtures_root.rglob("*.index")):
        log = index.with_suffix(".log")
        if not log.exists():
            continue
        base = int(index.name.split(".")[0])
        kafka_segment = LogSegment(index.parent, base)
        work = tmp_path / f"{compared}"
        work.mkdir()
        shutil.copy(log, work / log.name)
        rebuilt = LogSegment(work, base)
        rebuilt.recover()
        batches = scan_batches(log.read_bytes())
        targets = np.unique(np.concatenate([batches.base_offset, batches.last_offset, [base]]))
        # Every batch boundary of a small segment; of a big one an even spread with both ends (each lookup
        # goes through the index and a scan, and a big segment has tens of thousands of boundaries).
        picked = targets if len(targets) <= MAX_LOOKUPS else targets[np.linspace(0, len(targets) - 1, MAX_LOOKUPS,
                                                                               dtype=np.int64)]
        for target in picked:
            assert kafka_segment.translate_offset(int(target)) == rebuilt.translate_offset(int(target))
        compared += 1
    assert compared > 400


def test_mid_clean_directory_rolls_back_like_kafka(tmp_path: Path, fixtures_root: Path) -> None:
    source = fixtures_root / "getachew015-kafka-broker" / "data" / "kafka"
    work = tmp_path / "kafka"
    shutil.copytree(source, work)
    partition = work / "__consumer_offsets-13"
    original = (partition / "00000000000000000000.log").read_bytes()
    assert (partition / "00000000000000000000.log.swap").exists()

    result = run_cli("recover", "--log-dir", str(work), "--json")
    assert result.code == 0, result.err

    left = sorted(p.name for p in partition.iterdir())
    assert not [n for n in left if n.endswith((".swap", ".cleaned", ".deleted"))]
    assert (partition / "00000000000000000000.log").read_bytes() == original  # rolled back, not forward
    assert (work / "cleaner-offset-checkpoint.tmp").exists()  # a stale .tmp is ignored, as Kafka does
    assert verify_store(LogStore([work])).all_problems() == []


@pytest.mark.parametrize("name", _fixture_ids())
def test_recover_on_a_copy_keeps_every_record(tmp_path: Path, name: str) -> None:
    fixture = {d.name: d for d in kafka_data_dirs()}[name]
    work = tmp_path / "data"
    shutil.copytree(fixture.data_dir, work)
    before = verify_store(LogStore([work]))
    result = run_cli("recover", "--log-dir", str(work), "--json")
    assert result.code == 0, result.err
    after = verify_store(LogStore([work]))
    assert after.all_problems() == []
    assert [(p.topic, p.partition, p.records) for p in after.partitions] == \
           [(p.topic, p.partition, p.records) for p in before.partitions]
    # Every segment now has its indexes on disk.
    for log in work.rglob("*.log"):
        assert log.with_suffix(".index").exists() and log.with_suffix(".timeindex").exists()
