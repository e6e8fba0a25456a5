"""``kafkalog recover`` on ``num.recovery.threads.per.data.dir`` workers per log dir, as Kafka loads each log
dir's partitions on that many threads (``--processes N`` overrides): the partitions split across forked
processes (``kafkalog.log.shares``), and what they recover, report and checkpoint is what one process does."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, tree_digest

from kafkalog.log import names, shares
from kafkalog.log.checkpoint import read_offset_checkpoint
from kafkalog.log.store import LogStore

T0 = 1_700_000_000_000
TORN = (1, 4, 6)  # partitions whose last batch a crash left half written


def build_store(log_dir: Path, partitions: int = 7) -> None:
    store = LogStore([log_dir], create_missing=True)
    store.create_topic("t", partitions, {})
    for p in range(partitions):
        with store.writable_log(store.locate("t", p)) as log:
            for batch in range(p + 2):
                log.append_records([(f"k{i}".encode(), b"v" * 40, (), T0 + i) for i in range(10)], now_ms=T0)
                if batch == 0:
                    log.roll()
    for p in (p for p in TORN if p < partitions):
        segment = sorted((log_dir / f"t-{p}").glob("*.log"))[-1]
        segment.write_bytes(segment.read_bytes()[:-30])


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    asked: list[int] = []
    real = shares.map_shares

    def map_shares(work: Callable[[Sequence[Any]], Any], partitions: Sequence[Any], processes: int) -> list[Any]:
        asked.append(processes)
        return real(work, partitions, processes)

    monkeypatch.setattr(shares, "map_shares", map_shares)
    return asked


@pytest.mark.parametrize(("broker", "extra", "processes"), [
    ("", [], 2),  # Kafka's default: one thread per log dir
    ("num.recovery.threads.per.data.dir=3\n", [], 6),
    ("num.recovery.threads.per.data.dir=3\n", ["--processes", "1"], 1)])
def test_recover_works_on_the_recovery_threads_of_every_log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 broker: str, extra: list[str], processes: int) -> None:
    build_store(tmp_path / "a", 2)
    (tmp_path / "b").mkdir()  # a second log dir, empty
    (tmp_path / "server.properties").write_text(broker)
    asked = _spy(monkeypatch)
    done = run_cli("recover", "--log-dir", str(tmp_path / "a"), "--log-dir", str(tmp_path / "b"), "--config-file",
                   str(tmp_path / "server.properties"), *extra)
    assert done.code == 0, done.err
    assert asked == [processes]


def test_processes_must_be_a_positive_number(tmp_path: Path) -> None:
    build_store(tmp_path, 1)
    before = tree_digest(tmp_path)
    for bad, why in (("0", "0: must be at least 1"), ("-2", "-2: must be at least 1"),
                     ("two", "'two' is not a whole number")):
        done = run_cli("recover", "--log-dir", str(tmp_path), "--processes", bad)
        assert (done.code, done.err.splitlines()[-1]) == (2, f"kafkalog recover: error: argument --processes: {why}")
    assert tree_digest(tmp_path) == before
    assert run_cli("recover", "--log-dir", str(tmp_path), "--processes", "2").code == 0


@pytest.mark.parametrize("full", [False, True])
def test_a_recovery_split_across_processes_is_the_recovery_of_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  full: bool) -> None:
    one, split = tmp_path / "one", tmp_path / "split"
    build_store(one)
    shutil.copytree(one, split)
    for log_dir in (one, split):
        broken = log_dir / "t-3" / "00000000000000000000.log"
        broken.unlink()
        os.mkfifo(broken)  # not recoverable: its error must come back from whichever process had it
    flags = ["--full"] if full else []
    by_one = run_cli("recover", "--log-dir", str(one), "--json", "--processes", "1", *flags)
    monkeypatch.setattr(shares, "MIN_PARTITIONS_PER_PROCESS", 2)  # 7 partitions: 3 processes
    asked = _spy(monkeypatch)
    by_three = run_cli("recover", "--log-dir", str(split), "--json", "--processes", "3", *flags)
    assert asked == [3]
    assert by_one.code == by_three.code == 1
    doc_one, doc_three = json.loads(by_one.out), json.loads(by_three.out)
    assert json.loads(by_three.out.replace(str(split.resolve()), str(one.resolve()))) == doc_one
    assert [e.split(":")[0] for e in doc_three["errors"]] == ["t-3"]
    truncated = {r["partition"] for r in doc_three["partitions"] if r.get("truncated_bytes")}
    assert truncated == set(TORN)  # one in each share
    # Every process's recovery points reach the checkpoint file (the forked ones write their own share's).
    points = read_offset_checkpoint(split / names.RECOVERY_POINT_CHECKPOINT)
    assert {p: points[("t", p)] for p in TORN} == {p: r["log_end_offset"] for r in doc_three["partitions"]
                                                   for p in TORN if r["partition"] == p}
    assert tree_digest(split) == tree_digest(one)
    assert run_cli("verify", "--log-dir", str(split), "--topic", "t", "--partition", "6").code == 0
