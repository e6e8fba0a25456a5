"""The harness itself: what it writes reads back through kafka-python as Kafka's tests expect."""

from __future__ import annotations

from pathlib import Path

from kafka_log import T0, ScenarioLog


def test_appends_rolls_and_markers_read_back_through_kafka_python(tmp_path: Path) -> None:
    log = ScenarioLog(tmp_path, cleanup_policy="compact", segment_bytes=1024)
    assert log.append([("a", "1"), ("b", "2")]) == (0, 1)
    log.roll()
    assert log.txn(7, [("c", "3")]) == (2, 2)
    assert log.abort(7) == 3
    log.roll()
    assert log.segment_bases() == [0, 2, 4]
    assert log.offsets_in_log() == [0, 1, 2, 3]  # the marker's record has a key and a value
    assert log.keys_in_log() == ["a", "b", "c"]
    assert log.last_offsets_per_batch() == [1, 2, 3]
    assert [(b.control, b.transactional, b.producer_id) for b in log.batches()] == \
        [(False, False, -1), (False, True, 7), (True, True, 7)]
    assert log.aborted_txns() == [(7, 2, 3, 4)]
    assert [r.timestamp for r in log.records()] == [T0, T0, T0 + 1, T0 + 2]


def test_clean_is_a_round_from_the_given_first_dirty_offset(tmp_path: Path) -> None:
    log = ScenarioLog(tmp_path, cleanup_policy="compact")
    log.append_each([("k", "1"), ("k", "2"), ("j", "1")])
    log.roll()
    report = log.clean(T0)
    assert [c["end_offset"] for c in report["cleaned"]] == [3]  # type: ignore[index]
    assert log.keys_in_log() == ["k", "j"] and log.cleaner_checkpoint() == 3
    log.set_first_dirty(0)
    assert log.cleaner_checkpoint() == 0
