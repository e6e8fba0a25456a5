"""Cross-process locking: concurrent writer processes share a partition without losing a record."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli

from kafkalog.errors import LogLockedError
from kafkalog.log.lock import partition_lock


def _producer(log_dir: Path, tag: str, count: int) -> subprocess.Popen[bytes]:
    lines = "".join(f"{tag}-{i}:{tag}\n" for i in range(count)).encode()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkalog.cli", "produce", "--log-dir", str(log_dir), "--topic", "t",
         "--partition", "0", "--key-separator", ":", "--batch-records", "7"],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(lines)
    proc.stdin.close()
    return proc


def test_concurrent_producer_processes_lose_nothing(tmp_path: Path) -> None:
    assert run_cli("topics", "create", "--log-dir", str(tmp_path), "--topic", "t",
                   "--config", "segment.bytes=8192").code == 0
    rounds = [[_producer(tmp_path, f"p{p}r{r}", 300) for p in range(3)] for r in range(2)]
    for procs in rounds:
        for proc in procs:
            assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    out = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--print-offset")
    rows = [line.split("\t") for line in out.out.splitlines()]
    assert [int(r[0]) for r in rows] == list(range(6 * 300))  # every offset once, in order
    by_writer: dict[str, list[int]] = {}
    for _, key, _value in rows:
        writer, seq = key.rsplit("-", 1)
        by_writer.setdefault(writer, []).append(int(seq))
    assert len(by_writer) == 6
    assert all(seqs == list(range(300)) for seqs in by_writer.values())  # each writer's order kept
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0


def test_lock_times_out_with_a_clear_error_and_is_freed_when_the_holder_dies(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from kafkalog.log.lock import partition_lock\n"
         "with partition_lock(Path(sys.argv[1])):\n    print('locked', flush=True); time.sleep(60)",
         str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        with pytest.raises(LogLockedError, match="locked by another kafkalog process"):
            with partition_lock(tmp_path, timeout_s=0.2):
                pass
    finally:
        holder.kill()  # kill -9 equivalent: the kernel releases the flock
        holder.wait()
    started = time.monotonic()
    with partition_lock(tmp_path, timeout_s=5):
        assert time.monotonic() - started < 5
