"""``log.cleaner.threads``: ``kafkalog compact`` cleans up to that many partitions at a time, in threads of
one process, as each of Kafka's cleaner threads cleans one log at a time; the bytes are those one thread
writes, and a partition that fails does not stop the others."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from kafkalog.errors import LogLockedError
from kafkalog.maintenance import compact as compact_module
from kafkalog.maintenance.cleaner import CleanResult
from tests.pipeline.helpers import live_files
from tests.pipeline.synthetic import CHANGELOG, SESSIONS, build_store

SELECTED = [(CHANGELOG, 0), (CHANGELOG, 1), (SESSIONS, 0)]  # the cleaner manager's order: filthiest first


def _store(tmp_path: Path, threads: int) -> tuple[Path, Path, int]:
    now_ms = int(time.time() * 1000) - 60_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    broker = tmp_path / "server.properties"
    broker.write_text(f"log.cleaner.threads={threads}\n")
    return log_dir, broker, now_ms


def _compact(log_dir: Path, broker: Path, now_ms: int, *extra: str) -> Any:
    return run_cli("compact", "--log-dir", str(log_dir), "--config-file", str(broker), "--now-ms", str(now_ms),
                   "--json", *extra)


@pytest.mark.parametrize(("threads", "at_once"), [(1, 1), (2, 2), (8, 3)])
def test_compact_cleans_up_to_log_cleaner_threads_partitions_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     threads: int, at_once: int) -> None:
    log_dir, broker, now_ms = _store(tmp_path, threads)
    lock = threading.Lock()
    running, peak = [0], [0]

    def clean_partition(store: Any, location: Any, first_dirty: int, first_uncleanable: int, **_: Any) -> CleanResult:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)  # long enough for every thread the pool may run to start meanwhile
        with lock:
            running[0] -= 1
        tp = location.topic_partition
        return CleanResult(tp.topic, tp.partition, first_dirty, first_uncleanable)

    monkeypatch.setattr(compact_module, "clean_partition", clean_partition)
    done = _compact(log_dir, broker, now_ms)
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    assert [(s["topic"], s["partition"]) for s in doc["selected"]] == SELECTED
    assert [(c["topic"], c["partition"]) for c in doc["cleaned"]] == SELECTED  # reported in the plan's order
    assert peak[0] == at_once


def test_a_partition_that_fails_in_one_thread_leaves_the_others_cleaned(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    log_dir, broker, now_ms = _store(tmp_path, 3)
    real = compact_module.clean_partition

    def clean_partition(store: Any, location: Any, *args: Any, **kwargs: Any) -> CleanResult:
        if location.topic_partition.partition == 1:
            raise LogLockedError(f"{location.directory}: locked by another kafkalog process (waited 0 s)")
        return real(store, location, *args, **kwargs)

    monkeypatch.setattr(compact_module, "clean_partition", clean_partition)
    done = _compact(log_dir, broker, now_ms)
    assert done.code == 1
    doc = json.loads(done.out)
    assert [(c["topic"], c["partition"]) for c in doc["cleaned"]] == [(CHANGELOG, 0), (SESSIONS, 0)]
    assert doc["errors"] == [{"topic": CHANGELOG, "partition": 1, "error": f"{log_dir.resolve()}/{CHANGELOG}-1: "
                                                                           "locked by another kafkalog process "
                                                                           "(waited 0 s)"}]


def test_threads_write_the_bytes_one_thread_writes(tmp_path: Path) -> None:
    log_dir, broker, now_ms = _store(tmp_path, 3)
    one = tmp_path / "one"
    shutil.copytree(log_dir, one)
    (tmp_path / "one.properties").write_text("log.cleaner.threads=1\n")
    wall = str(now_ms + 1000)
    threaded = _compact(log_dir, broker, now_ms, "--wall-now-ms", wall)
    single = _compact(one, tmp_path / "one.properties", now_ms, "--wall-now-ms", wall)
    assert threaded.code == single.code == 0, threaded.err + single.err
    assert len(json.loads(threaded.out)["cleaned"]) == 3
    assert live_files(log_dir) == live_files(one)
    assert run_cli("verify", "--log-dir", str(log_dir)).code == 0
