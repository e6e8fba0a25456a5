"""Every corruption class × every command (issue: reliability).

One store — a ``compact,delete`` topic of four segments, the first expired — is copied for each cell,
damaged in its second segment (or beside it), and given one command. Each cell expects one of:

- ``SAME``: exit 0 and the answer the healthy store gives (output and the records left after), as
  Kafka, which rebuilds derived files and does not read sealed segments for these, would give;
- ``REFUSED``: exit ≠ 0, one line on stderr naming the damaged file, nothing changed;
- ``REPORTED``: exit 1 with the damaged file named in the report, nothing changed;
- ``QUARANTINED``: ``status`` lists the partition as quarantined, naming the file;
- ``CUT``: ``consume`` serves every record before the damage in order (none past it), then exits 1
  naming the file and the offset;
- ``REPAIRED``: exit 0 and ``verify`` passes afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest

from kafkalog.log import checkpoint, names
from tests.spark.processes import spark_missing

HOUR_MS = 3_600_000
NOW_MS = int(time.time() * 1000)
DAMAGED = "00000000000000000110"  # the second segment: offsets 110-209
LOCK_FILES = {names.PARTITION_LOCK_FILE, names.CLEANER_LOCK_FILE, names.ADMIN_LOCK_FILE}

COMMANDS: dict[str, list[str]] = {
    "verify": ["verify"],
    "status": ["status", "--json", "--now-ms", str(NOW_MS)],
    "consume": ["consume", "--topic", "t", "--partition", "0", "--print-offset"],
    "produce": ["produce", "--topic", "t", "--key-separator", ":"],
    "retention plan": ["retention", "plan", "--json", "--now-ms", str(NOW_MS)],
    "retention apply": ["retention", "apply", "--now-ms", str(NOW_MS)],
    "retention sweep": ["retention", "sweep"],
    "compact --dry-run": ["compact", "--dry-run", "--json", "--now-ms", str(NOW_MS)],
    "compact": ["compact", "--now-ms", str(NOW_MS)],
    "compact --topic": ["compact", "--topic", "t", "--now-ms", str(NOW_MS)],
    "recover": ["recover"],
    "recover --full": ["recover", "--full"],
}


# --- the corruptions: each damages a partition of a copy of the store and returns the file a message must name
def _segment(partition: Path, suffix: str) -> Path:
    return partition / f"{DAMAGED}{suffix}"


def _batch_position(data: bytes, index: int) -> int:
    position = 0
    for _ in range(index):
        position += 12 + int.from_bytes(data[position + 8:position + 12], "big")
    return position


def _damage_third_batch(partition: Path, edit: str) -> str:
    """Damage the second segment's third batch (offsets 130-139): its length (a little longer, or past the
    segment's end), base offset or a record byte."""
    path = partition / f"{DAMAGED}.log"
    data = bytearray(path.read_bytes())
    at = _batch_position(bytes(data), 2)
    if edit.startswith("length"):
        length = int.from_bytes(data[at + 8:at + 12], "big")
        # A flipped bit of the length field: the batch runs 1 MiB past the segment's end, so framing
        # stops there as at a torn write, and a reader that took it for one would skip to offset 210.
        longer = length ^ 0x00100000 if edit == "length past the end" else length + 100
        data[at + 8:at + 12] = longer.to_bytes(4, "big")
    elif edit == "base-offset":
        data[at + 7] ^= 0x40  # outside the CRC
    else:
        data[at + 61 + 5] ^= 0xFF  # inside the first record: the CRC no longer matches
    path.write_bytes(bytes(data))
    return path.name


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return path.name


def _decreasing_time_index(partition: Path) -> str:
    path = _segment(partition, ".timeindex")
    entries = path.read_bytes()
    return _write(path, (NOW_MS + HOUR_MS).to_bytes(8, "big") + entries[8:12] + entries[:12])


def _indexes_missing(partition: Path) -> str:
    _segment(partition, ".index").unlink()
    _segment(partition, ".timeindex").unlink()
    return f"{DAMAGED}.index"


def _index_symlink(partition: Path) -> str:
    outside = partition.parent.parent / f"{partition.parent.name}-{partition.name}-outside.bin"
    outside.write_bytes(b"x" * 4096)
    _segment(partition, ".index").unlink()
    _segment(partition, ".index").symlink_to(outside)
    return f"{DAMAGED}.index"


def _fifo(partition: Path) -> str:
    os.mkfifo(partition / "00000000000000099999.log")
    return "00000000000000099999.log"


def _log_start_past_end(partition: Path) -> str:
    tp = names.parse_partition_dir_name(partition.name)
    assert tp is not None
    path = partition.parent / names.LOG_START_OFFSET_CHECKPOINT
    entries = checkpoint.read_offset_checkpoint(path)
    checkpoint.write_offset_checkpoint(path, {**entries, (tp.topic, tp.partition): 5000})
    return names.LOG_START_OFFSET_CHECKPOINT


def _epoch_garbage(partition: Path) -> str:
    return _write(partition / names.LEADER_EPOCH_CHECKPOINT, b"garbage\n")


CORRUPTIONS: dict[str, Callable[[Path], str]] = {
    "index entry past the data": lambda d: _write(_segment(d, ".index"), bytes.fromhex("000000050000f423")),
    "random index": lambda d: _write(_segment(d, ".index"), bytes(range(64))),
    "5-byte index": lambda d: _write(_segment(d, ".index"), b"\0" * 5),
    "negative index position": lambda d: _write(_segment(d, ".index"), bytes.fromhex("00000002ffffff00")),
    "decreasing time index": _decreasing_time_index,
    "indexes missing": _indexes_missing,
    "batch length": lambda d: _damage_third_batch(d, "length"),
    "batch base offset": lambda d: _damage_third_batch(d, "base-offset"),
    "batch CRC": lambda d: _damage_third_batch(d, "crc"),
    "batch length past the end": lambda d: _damage_third_batch(d, "length past the end"),
    "index symlinked outside": _index_symlink,
    "FIFO segment": _fifo,
    "log start past the end": _log_start_past_end,
    "garbage epoch checkpoint": _epoch_garbage,
}
DERIVED = ("index entry past the data", "random index", "5-byte index", "negative index position",
           "decreasing time index", "indexes missing")
DATA = ("batch length", "batch base offset", "batch CRC", "batch length past the end")
UNUSABLE = ("index symlinked outside", "FIFO segment", "log start past the end")
DAMAGED_OFFSET = 130  # the first offset of the damaged batch


def expected(corruption: str, command: str) -> str:
    """The answer each cell must give (see the module docstring)."""
    if corruption in DERIVED:  # derived files: Kafka's loader rebuilds them, so every answer is the healthy one
        if command == "verify":
            return "SAME" if corruption == "indexes missing" else "REPORTED"
        return "REPAIRED" if command.startswith("recover") else "SAME"
    if corruption in DATA:
        # Retention, status and the cleaner manager's plan read indexes and sizes only, as Kafka's do;
        # whatever reads the damaged batch stops there.
        table = {"verify": "REPORTED", "consume": "CUT", "compact": "REFUSED", "compact --topic": "REFUSED",
                 "recover --full": "REPAIRED"}
        if corruption.startswith("batch length"):  # the framing breaks: the loader's index check sees it
            table |= {"produce": "REFUSED", "retention apply": "REFUSED", "recover": "REPAIRED"}
        return table.get(command, "SAME")
    if corruption == "garbage epoch checkpoint":  # only what updates the epoch cache reads it
        table = {"verify": "REPORTED", "produce": "REFUSED", "retention apply": "REFUSED", "recover": "REFUSED",
                 "recover --full": "REFUSED"}
        return table.get(command, "SAME")
    # A file kafkalog will not use, or a checkpoint it must not believe: the partition is left alone.
    table = {"verify": "REPORTED", "status": "QUARANTINED", "retention plan": "REPORTED",
             "compact --dry-run": "REPORTED", "retention sweep": "SAME"}
    return table.get(command, "REFUSED")


# --- running a cell ----------------------------------------------------------------------------------
def _build(log_dir: Path, topic: str = "t") -> None:
    configs = ["cleanup.policy=compact,delete", "segment.bytes=2048", "retention.ms=3600000",
               "min.cleanable.dirty.ratio=0.01"]
    assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", topic,
                   *[a for c in configs for a in ("--config", c)]).code == 0
    for timestamp_ms, first in ((NOW_MS - 10 * HOUR_MS, 0), (NOW_MS - 60_000, 200)):
        lines = "".join(f"k{i % 20}:v{i}\n" for i in range(first, first + 200))
        done = run_cli("produce", "--log-dir", str(log_dir), "--topic", topic, "--key-separator", ":",
                       "--batch-records", "10", "--timestamp-ms", str(timestamp_ms), stdin=lines)
        assert done.code == 0, done.err
    assert sorted(p.name for p in (log_dir / f"{topic}-0").glob("*.log"))[1] == f"{DAMAGED}.log"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("matrix") / "template"
    _build(log_dir)
    return log_dir


def _normalized(text: str, log_dir: Path) -> str:
    text = text.replace(str(log_dir), "LOG_DIR")
    text = re.sub(r"run-\d{8}T\d{6}Z-[0-9a-f]{8}", "RUN", text)
    return re.sub(r"\d+\.\d+ MB/s", "N MB/s", text)


def _records(log_dir: Path) -> tuple[int, str]:
    done = run_cli("consume", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--print-offset")
    return done.code, done.out


def _state(log_dir: Path) -> dict[str, str]:
    return {path: digest for path, digest in tree_digest(log_dir).items() if Path(path).name not in LOCK_FILES}


def _run(log_dir: Path, command: str) -> tuple[int, str, str]:
    done = run_cli(*COMMANDS[command], "--log-dir", str(log_dir), stdin="k1:new\n")
    return done.code, _normalized(done.out, log_dir), done.err


@pytest.fixture(scope="module")
def healthy(template: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, tuple[int, str]]]:
    """Each command's output on the healthy store, and the records left after it."""
    answers = {}
    for command in COMMANDS:
        log_dir = tmp_path_factory.mktemp("healthy") / "logs"
        shutil.copytree(template, log_dir)
        code, out, err = _run(log_dir, command)
        assert code == 0, (command, err)
        answers[command] = (out, _records(log_dir))
    return answers


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_every_command_answers_right_or_refuses_and_changes_nothing(
        corruption: str, template: Path, healthy: dict[str, tuple[str, tuple[int, str]]], tmp_path: Path) -> None:
    wrong = []
    for command in COMMANDS:
        log_dir = tmp_path / command.replace(" ", "_")
        shutil.copytree(template, log_dir, symlinks=True)
        named = CORRUPTIONS[corruption](log_dir / "t-0")
        before = _state(log_dir)
        code, out, err = _run(log_dir, command)
        want = expected(corruption, command)
        unchanged = _state(log_dir) == before
        one_line = err.count("\n") == 1 and "Traceback" not in err
        if want == "SAME":
            healthy_out, (healthy_code, healthy_records) = healthy[command]
            records_code, records = _records(log_dir)
            if corruption in DATA:  # the records up to the damage are those of the healthy store
                same_records = records_code == 1 and healthy_records.startswith(records)
            elif corruption in UNUSABLE:  # nothing can read it; nothing may change it
                same_records = unchanged
            else:
                same_records = (records_code, records) == (healthy_code, healthy_records)
            ok = code == 0 and out == healthy_out and same_records
        elif want == "REFUSED":
            ok = code != 0 and one_line and named in err and unchanged
        elif want == "REPORTED":
            ok = code == 1 and named in out and unchanged
        elif want == "QUARANTINED":
            [row] = json.loads(out)["partitions"]
            ok = code == 0 and row["quarantined"] and any(named in r for r in row["blocked_by"]) and unchanged
        elif want == "CUT":
            offsets = [int(line.split("\t", 1)[0]) for line in out.splitlines()]
            ok = (code == 1 and one_line and named in err and "offset" in err and unchanged
                  and offsets == list(range(DAMAGED_OFFSET)))
        else:  # REPAIRED
            ok = code == 0 and run_cli("verify", "--log-dir", str(log_dir)).code == 0
            if corruption in DERIVED:
                ok = ok and _records(log_dir) == healthy[command][1]
        if not ok:
            wrong.append(f"{command}: expected {want}, got exit {code}; stderr {err.strip()[:200]!r}; "
                         f"stdout {out.strip()[:200]!r}; {'unchanged' if unchanged else 'changed'}")
    assert wrong == [], "\n".join(wrong)


# --- the Spark job reads every batch it cleans as the cleaner does ---------------------------------------
@pytest.mark.slow
@pytest.mark.spark
def test_the_spark_job_leaves_each_damaged_partition_untouched(tmp_path: Path) -> None:
    """One job over four such partitions — three with damaged data, one healthy — reports the
    three, naming the file, leaves them byte for byte as they were, and compacts the fourth."""
    reason = spark_missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the Spark tests")
        pytest.skip(reason)
    log_dir = tmp_path / "logs"
    topics = {"t": None, "length": "length", "base": "base-offset", "crc": "crc"}
    for topic, edit in topics.items():
        _build(log_dir, topic)
        if edit is not None:
            _damage_third_batch(log_dir / f"{topic}-0", edit)
    before = {topic: _state(log_dir / f"{topic}-0") for topic in topics}
    report = tmp_path / "report.json"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
                           "--conf", "spark.ui.enabled=false", "spark_jobs/compact_logs.py", "--log-dir", str(log_dir),
                           "--now-ms", str(NOW_MS), "--report", str(report), "--partition-failures-ok"],
                          cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(report.read_text())
    failed = {p["topic"]: p["error"] for p in doc["partitions"] if not p["ok"]}
    assert sorted(failed) == ["base", "crc", "length"], doc
    for topic in failed:
        assert f"{DAMAGED}.log" in failed[topic], failed[topic]
        assert _state(log_dir / f"{topic}-0") == before[topic]
    assert _state(log_dir / "t-0") != before["t"]
    assert [p["topic"] for p in doc["partitions"] if p["status"] == "cleaned"] == ["t"]
