"""Unlucky and hostile input through the CLI (issue: reliability). Each test reproduces one report: it
fails on the code before the fix and says, with the commands, what the user sees now."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest

from kafkalog.log import checkpoint, names

HOUR_MS = 3_600_000


def _topic(log_dir: Path, *configs: str, topic: str = "t", records: int = 400, key: bool = True,
           timestamp_ms: int | None = None, batch_records: int = 10) -> None:
    config = [a for c in configs for a in ("--config", c)]
    assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", topic, *config).code == 0
    lines = "".join(f"k{i % 20}:v{i}\n" if key else f"v{i}\n" for i in range(records))
    extra = ["--key-separator", ":"] if key else []
    if timestamp_ms is not None:
        extra += ["--timestamp-ms", str(timestamp_ms)]
    done = run_cli("produce", "--log-dir", str(log_dir), "--topic", topic, "--batch-records", str(batch_records),
                   *extra, stdin=lines)
    assert done.code == 0, done.err


def _segments(partition: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in partition.glob("*.log"))


def _plan(log_dir: Path, now_ms: int | None = None) -> tuple[int, dict[str, object]]:
    args = ["retention", "plan", "--log-dir", str(log_dir), "--json"]
    if now_ms is not None:
        args += ["--now-ms", str(now_ms)]
    done = run_cli(*args)
    return done.code, json.loads(done.out) if done.out else {"err": done.err}


# --- A. policy applied to the log as Kafka's loader sees it ----------------------------------------------
def test_retention_bytes_works_with_the_default_retention_ms(tmp_path: Path) -> None:
    _topic(tmp_path, "segment.bytes=1024", "retention.bytes=3000")
    code, doc = _plan(tmp_path)
    assert code == 0, doc
    [partition] = doc["partitions"]  # type: ignore[index]
    assert partition["segments"] and {s["reason"] for s in partition["segments"]} == {"retention.bytes"}
    assert run_cli("retention", "apply", "--log-dir", str(tmp_path)).code == 0
    sizes = sum(p.stat().st_size for p in (tmp_path / "t-0").glob("*.log"))
    assert sizes - partition["segments"][-1]["bytes"] < 3000 + 1024  # trimmed to about retention.bytes


def test_time_retention_judges_a_segment_without_indexes_by_its_records(tmp_path: Path) -> None:
    old = int(time.time() * 1000) - 10 * HOUR_MS
    _topic(tmp_path, "segment.bytes=1024", "retention.ms=3600000", timestamp_ms=old)
    partition = tmp_path / "t-0"
    for index in list(partition.glob("*.index")) + list(partition.glob("*.timeindex")):
        index.unlink()  # copied without its indexes; the files' mtimes are new
    code, doc = _plan(tmp_path)
    assert code == 0, doc
    planned = doc["partitions"][0]["segments"]  # type: ignore[index]
    assert len(planned) == len(_segments(partition))  # every record is 10 h old: all of them, after a roll
    assert doc["partitions"][0]["roll_first"]  # type: ignore[index]
    assert {s["reason"] for s in planned} == {"retention.ms"} and "time-index" in planned[0]["detail"]


def test_a_partition_dir_with_indexes_and_no_log_is_an_empty_log(tmp_path: Path) -> None:
    _topic(tmp_path, records=5)
    partition = tmp_path / "t-0"
    for log in partition.glob("*.log"):
        log.unlink()  # index files left, as in a Kafka-written dir
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0
    code, doc = _plan(tmp_path)
    assert code == 0 and doc["partitions"][0]["segments"] == []  # type: ignore[index]
    dry = run_cli("compact", "--log-dir", str(tmp_path), "--dry-run")
    assert dry.code == 0, dry.err


# --- B. readers are never served wrong data with exit 0 ---------------------------------------------------
def test_an_index_entry_past_the_data_is_not_followed_and_recover_rebuilds_it(tmp_path: Path) -> None:
    _topic(tmp_path, "segment.bytes=100000", records=200)
    index = tmp_path / "t-0" / "00000000000000000000.index"
    index.write_bytes(bytes.fromhex("000000050000f423"))  # offset 5 at byte 62,499: past the data
    got = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--from-offset", "65",
                  "--print-offset", "--max-records", "1")
    assert got.code == 0 and got.out.split("\t")[0] == "65"
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 1
    assert run_cli("recover", "--log-dir", str(tmp_path)).code == 0
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0


@pytest.mark.parametrize("damage", ["random-index", "decreasing-timeindex", "five-byte-index"])
def test_verify_reports_index_files_kafka_would_not_accept(tmp_path: Path, damage: str) -> None:
    _topic(tmp_path, "segment.bytes=4096", records=300)
    base = tmp_path / "t-0" / "00000000000000000000"
    if damage == "random-index":
        Path(f"{base}.index").write_bytes(os.urandom(64))
    elif damage == "decreasing-timeindex":
        entries = Path(f"{base}.timeindex").read_bytes()
        Path(f"{base}.timeindex").write_bytes((2_000_000_000_000).to_bytes(8, "big") + entries[8:12] + entries[:12])
    else:
        Path(f"{base}.index").write_bytes(b"\x00" * 5)
    verify = run_cli("verify", "--log-dir", str(tmp_path))
    assert verify.code == 1 and "PROBLEM" in verify.out and "index" in verify.out, verify.out
    assert run_cli("recover", "--log-dir", str(tmp_path)).code == 0
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0


def test_a_log_start_checkpoint_past_the_log_end_is_refused(tmp_path: Path) -> None:
    _topic(tmp_path, records=10)
    path = tmp_path / names.LOG_START_OFFSET_CHECKPOINT
    checkpoint.write_offset_checkpoint(path, {("t", 0): 500})
    before = tree_digest(tmp_path)
    produced = run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--key-separator", ":", stdin="k:v\n")
    assert produced.code == 1 and "log start offset checkpoint says 500 but the log ends at 10" in produced.err
    assert tree_digest(tmp_path) == before


# --- C. safety ------------------------------------------------------------------------------------------------
def test_an_index_symlinked_outside_is_never_written_through(tmp_path: Path) -> None:
    log_dir, outside = tmp_path / "logs", tmp_path / "precious.bin"
    _topic(log_dir, records=50)
    outside.write_bytes(b"x" * 4096)
    index = log_dir / "t-0" / "00000000000000000000.index"
    index.unlink()
    index.symlink_to(outside)
    for args in (["recover"], ["produce", "--topic", "t", "--key-separator", ":"]):
        done = run_cli(args[0], "--log-dir", str(log_dir), *args[1:], stdin="k:v\n")
        assert done.code == 1 and "a symlink" in done.err, (args, done.err)
    assert outside.read_bytes() == b"x" * 4096 and index.is_symlink()


def test_a_fifo_named_like_a_segment_is_refused_without_hanging(tmp_path: Path) -> None:
    _topic(tmp_path, "cleanup.policy=compact", records=50)
    os.mkfifo(tmp_path / "t-0" / "00000000000000099999.log")
    for args in (["compact", "--dry-run"], ["compact"], ["retention", "plan"], ["verify"]):
        done = subprocess.run([sys.executable, "-m", "kafkalog.cli", *args, "--log-dir", str(tmp_path)],
                              capture_output=True, text=True, timeout=60)
        said = done.stderr + done.stdout
        assert done.returncode == 1 and ("a FIFO" in said or "not a regular file" in said), (args, said)


def test_topic_creation_is_bounded_and_all_or_nothing(tmp_path: Path) -> None:
    huge = run_cli("topics", "create", "--log-dir", str(tmp_path), "--topic", "t", "--partitions", "2147483648")
    assert huge.code == 1 and "between 1 and 100000" in huge.err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("t-")] == []
    (tmp_path / "u-3").mkdir()  # in the way of partition 3
    (tmp_path / "u-3" / "junk").write_text("")
    clash = run_cli("topics", "create", "--log-dir", str(tmp_path), "--topic", "u", "--partitions", "6")
    assert clash.code == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("u-")) == ["u-3"]  # nothing half-made
    assert "u" not in json.loads(run_cli("topics", "describe", "--log-dir", str(tmp_path), "--json").out)["topics"]


# --- D. one-line errors; all-or-nothing per partition -------------------------------------------------------
def test_bad_produce_input_gets_one_line_and_changes_nothing(tmp_path: Path) -> None:
    _topic(tmp_path, records=5)
    before = tree_digest(tmp_path)
    cases = [(["--timestamp-ms", str(2**63)], "k:v\n", "must be between 0 and"),
             (["--key-separator", ""], "k:v\n", "--key-separator must not be empty")]
    for extra, stdin, message in cases:
        done = run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", *extra, stdin=stdin)
        assert done.code == 1 and message in done.err and done.err.count("\n") == 1, done.err
    raw = subprocess.run([sys.executable, "-m", "kafkalog.cli", "produce", "--log-dir", str(tmp_path), "--topic", "t",
                          "--key-separator", ":"], input=b"k:v\nk:\xff\xfe\n", capture_output=True, timeout=60)
    assert raw.returncode == 1 and b"stdin line 2: invalid UTF-8" in raw.stderr and raw.stderr.count(b"\n") == 1
    assert tree_digest(tmp_path) == before


def test_a_read_only_log_dir_gets_one_line(tmp_path: Path) -> None:
    """A log dir on a read-only mount (EROFS), as a restored backup often is."""
    source, mounted = tmp_path / "source", tmp_path / "ro"
    _topic(source, records=5)
    mounted.mkdir()
    bind = subprocess.run(["mount", "--bind", str(source), str(mounted)], capture_output=True, text=True)
    if bind.returncode != 0:
        if os.environ.get("CI") == "true" and os.geteuid() == 0:
            pytest.fail(f"cannot bind-mount as root: {bind.stderr}")
        pytest.skip(f"bind mounts are not permitted here: {bind.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], check=True, capture_output=True)
        before = tree_digest(source)
        done = run_cli("produce", "--log-dir", str(mounted), "--topic", "t", "--key-separator", ":", stdin="k:v\n")
        applied = run_cli("retention", "apply", "--log-dir", str(mounted))
    finally:
        subprocess.run(["umount", str(mounted)], check=True)
    assert done.code == 1 and done.err.startswith("kafkalog: error: Read-only file system") and \
        done.err.count("\n") == 1, done.err
    assert applied.code in (0, 1) and "Traceback" not in applied.err
    assert tree_digest(source) == before


def test_a_negative_index_position_is_rebuilt_not_an_oserror(tmp_path: Path) -> None:
    _topic(tmp_path, records=50)
    (tmp_path / "t-0" / "00000000000000000000.index").write_bytes(bytes.fromhex("00000005ffffff00"))
    got = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--from-offset", "7",
                  "--print-offset", "--max-records", "1")
    assert got.code == 0 and got.out.startswith("7\t"), got.err
    assert run_cli("recover", "--log-dir", str(tmp_path)).code == 0


def test_recover_goes_on_past_a_partition_it_cannot_recover(tmp_path: Path) -> None:
    for topic in ("a", "b"):
        _topic(tmp_path, records=20, topic=topic)
    bad = tmp_path / "a-0" / "00000000000000000000.index"
    bad.write_bytes(b"\x00" * 5)
    os.mkfifo(tmp_path / "a-0" / "00000000000000099999.timeindex")
    torn = tmp_path / "b-0" / "00000000000000000000.log"
    with open(torn, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x30\x00\x00\x00\x40")  # a torn batch header at the end
    done = run_cli("recover", "--log-dir", str(tmp_path))
    assert done.code == 1 and "a-0:" in done.err
    assert "b-0: segment 0: truncated" in done.out  # b was still recovered


def test_max_records_zero_prints_nothing_and_negative_is_refused(tmp_path: Path) -> None:
    _topic(tmp_path, records=5)
    zero = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--max-records", "0")
    assert zero.code == 0 and zero.out == ""
    negative = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0",
                       "--max-records", "-1")
    assert negative.code == 1 and "--max-records -1" in negative.err


def test_a_partition_spelled_twice_names_both_dirs(tmp_path: Path) -> None:
    _topic(tmp_path, records=5)
    shutil.copytree(tmp_path / "t-0", tmp_path / "t-00")
    status = run_cli("status", "--log-dir", str(tmp_path), "--json")
    assert status.code == 0  # "t-00" is not Kafka's spelling of a partition dir: not a second t-0
    rows = json.loads(status.out)["partitions"]
    assert [(r["topic"], r["partition"]) for r in rows] == [("t", 0)]


def _damage_batch(segment: Path, index: int, edit: str) -> int:
    """Damage the ``index``-th batch of a segment: its length field or its base offset; returns its offset."""
    data = bytearray(segment.read_bytes())
    position = 0
    for _ in range(index):
        position += 12 + int.from_bytes(data[position + 8:position + 12], "big")
    offset = int.from_bytes(data[position:position + 8], "big")
    if edit == "length":
        length = int.from_bytes(data[position + 8:position + 12], "big")
        data[position + 8:position + 12] = (length + 100).to_bytes(4, "big")
    else:
        data[position + 7] ^= 0x40  # the base offset: not covered by the CRC
    segment.write_bytes(bytes(data))
    return offset


@pytest.mark.parametrize("edit", ["length", "base-offset"])
def test_a_damaged_batch_mid_log_stops_readers_and_recover_full_cuts_there(tmp_path: Path, edit: str) -> None:
    _topic(tmp_path, "segment.bytes=100000", records=400)
    offset = _damage_batch(tmp_path / "t-0" / "00000000000000000000.log", 12, edit)
    assert offset == 120
    got = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--print-offset")
    served = [int(line.split("\t")[0]) for line in got.out.splitlines()]
    assert got.code == 1 and served == sorted(set(served)) and all(o < 120 for o in served), got.err
    verify = run_cli("verify", "--log-dir", str(tmp_path))
    assert verify.code == 1 and "kafkalog recover" in verify.out
    assert run_cli("recover", "--log-dir", str(tmp_path), "--full").code == 0
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0
    after = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--print-offset")
    assert [int(line.split("\t")[0]) for line in after.out.splitlines()] == list(range(120))


def test_readers_follow_segments_that_retention_and_compaction_move(tmp_path: Path) -> None:
    """A reader that takes no lock, while the segments it lists are marked deleted and swapped."""
    import threading

    from kafkalog.log.store import LogStore
    from kafkalog.maintenance.compact import compact
    from kafkalog.tools.verify import verify_store

    now_ms = int(time.time() * 1000)
    _topic(tmp_path, "cleanup.policy=compact,delete", "segment.bytes=2048", "retention.ms=3600000",
           records=3000, timestamp_ms=now_ms - 2 * HOUR_MS)
    store = LogStore([tmp_path])
    errors: list[str] = []
    reads = 0
    stop = threading.Event()

    def read() -> None:
        nonlocal reads
        while not stop.is_set():
            try:
                log = LogStore([tmp_path]).open_log(LogStore([tmp_path]).locate("t", 0), read_only=True)
                offsets = [int(columns.offset[row]) for columns, row in log.read_records(0)]
                if offsets != sorted(set(offsets)):
                    errors.append("offsets out of order or repeated")
                report = verify_store(LogStore([tmp_path]))
                if not report.ok:
                    errors.append("; ".join(report.all_problems()))
                reads += 1
            except Exception as exc:  # noqa: BLE001 - any crash of a reader is the failure looked for
                errors.append(f"{type(exc).__name__}: {exc}")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for round_ in range(6):
            lines = "".join(f"k{i % 20}:late{round_}-{i}\n" for i in range(300))
            assert run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--key-separator", ":",
                           "--batch-records", "10", stdin=lines).code == 0
            compact(store, now_ms=int(time.time() * 1000), topic="t")
            if round_ == 2:
                assert run_cli("retention", "apply", "--log-dir", str(tmp_path)).code == 0
    finally:
        stop.set()
        reader.join(timeout=120)
    assert reads > 0 and errors == []


def test_a_reader_listing_taken_before_a_swap_serves_the_swapped_log(tmp_path: Path) -> None:
    """A lock-free reader lists segments, then the cleaner swaps a group of them into one segment that
    reaches past the next listed base before the reader opens it: the listing is stale, not the log
    corrupt, so the reader lists again and serves every record the cleaned log holds, once."""
    from kafkalog.log.store import LogStore
    from kafkalog.maintenance.compact import compact

    now_ms = int(time.time() * 1000)
    _topic(tmp_path, "cleanup.policy=compact", "segment.bytes=2048", records=3000)
    store = LogStore([tmp_path])
    compact(store, now_ms=now_ms, topic="t")  # segments of a few records each, which the next round groups
    lines = "".join(f"k{i % 20}:late{i}\n" for i in range(300))
    assert run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--key-separator", ":",
                   "--batch-records", "10", stdin=lines).code == 0
    stale = store.open_log(store.locate("t", 0), read_only=True)
    before = _segments(tmp_path / "t-0")
    compact(store, now_ms=now_ms, topic="t")
    assert len(_segments(tmp_path / "t-0")) < len(before)  # groups were merged under the listing
    fresh = LogStore([tmp_path]).open_log(store.locate("t", 0), read_only=True)
    expected = [int(columns.offset[row]) for columns, row in fresh.read_records(0)]
    served = [int(columns.offset[row]) for columns, row in stale.read_records(0)]
    assert served == expected and len(expected) < 3000


def test_produce_with_a_garbage_epoch_checkpoint_appends_nothing(tmp_path: Path) -> None:
    _topic(tmp_path, records=1)
    (tmp_path / "t-0" / names.LEADER_EPOCH_CHECKPOINT).write_text("garbage\n")
    before = tree_digest(tmp_path)
    done = run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--key-separator", ":", stdin="k:v\n")
    assert done.code == 1 and "leader-epoch-checkpoint: malformed line 1" in done.err
    assert tree_digest(tmp_path) == before  # a retry will not duplicate anything


def test_recover_drops_producer_snapshots_past_the_new_log_end(tmp_path: Path) -> None:
    _topic(tmp_path, "segment.bytes=1024", records=300)
    partition = tmp_path / "t-0"
    snapshots = sorted(int(p.name[:20]) for p in partition.glob("*.snapshot"))
    assert len(snapshots) >= 2
    _damage_batch(partition / "00000000000000000000.log", 3, "length")
    assert run_cli("recover", "--log-dir", str(tmp_path), "--full").code == 0
    left = sorted(int(p.name[:20]) for p in partition.glob("*.snapshot"))
    assert left == [s for s in snapshots if s <= 30] and len(left) < len(snapshots)
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0
    assert run_cli("compact", "--log-dir", str(tmp_path), "--dry-run").code == 0


# --- issue #35, item 7: a symlinked partition dir is named by every command, never followed --------------
def test_a_symlinked_partition_dir_is_reported_by_every_command_and_never_followed(tmp_path: Path) -> None:
    """Before: verify, status and retention left t-1 out without a word while topic t still had it."""
    log_dir, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    _topic(log_dir, "retention.ms=3600000", "segment.bytes=1024", "index.interval.bytes=100", records=200,
           timestamp_ms=int(time.time() * 1000) - 2 * HOUR_MS)
    assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", "u", "--partitions", "2").code == 0
    elsewhere.mkdir()
    shutil.move(log_dir / "u-1", elsewhere / "u-1")
    (log_dir / "u-1").symlink_to(elsewhere / "u-1")
    refusal = (f"{log_dir}/u-1: partition directory is a symlink to {elsewhere}/u-1; kafkalog does not follow it "
               "into another directory (put the partition's directory itself in the log dir)")
    outside = tree_digest(elsewhere)

    verify = run_cli("verify", "--log-dir", str(log_dir))
    assert verify.code == 1 and f"PROBLEM {refusal}" in verify.out.splitlines()
    assert verify.out.endswith("FAILED (1 problems): 3 partitions, 20 batches, 200 records verified\n")

    status = run_cli("status", "--log-dir", str(log_dir), "--json")
    rows = {(r["topic"], r["partition"]): r for r in json.loads(status.out)["partitions"]}
    assert status.code == 0 and sorted(rows) == [("t", 0), ("u", 0), ("u", 1)]
    assert rows[("u", 1)]["quarantined"] and rows[("u", 1)]["blocked_by"] == [f"corrupt: {refusal}"]

    code, plan = _plan(log_dir)
    assert code == 1 and plan["errors"] == [{"topic": "u", "partition": 1, "error": refusal, "locked": False}]
    assert [p["topic"] for p in plan["partitions"]] == ["t", "u"]  # type: ignore[index]

    applied = run_cli("retention", "apply", "--log-dir", str(log_dir))
    assert applied.code == 1 and applied.err == f"kafkalog: error: u-1: {refusal}\n"
    assert list((log_dir / "t-0").glob("*.deleted"))  # the other partitions were maintained
    for command in (["recover"], ["recover", "--full"]):
        recovered = run_cli(*command, "--log-dir", str(log_dir))
        assert recovered.code == 1 and recovered.err == f"kafkalog: error: u-1: {refusal}\n"
    for command in (["consume", "--partition", "1"], ["produce", "--partition", "1"]):
        done = run_cli(*command, "--log-dir", str(log_dir), "--topic", "u", stdin="x\n")
        assert (done.code, done.err) == (1, f"kafkalog: error: {refusal}\n")
    assert tree_digest(elsewhere) == outside  # not a lock file, not a mark, not a truncation there


# --- issue #35, item 12: dump refuses what is not a regular file; a full disk leaves whole batches -------
def test_dump_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    """Before: `kafkalog dump --files <FIFO>` blocked in open() until a writer came, forever."""
    _topic(tmp_path, records=20)
    fifo = tmp_path / "00000000000000000000.log"
    os.mkfifo(fifo)
    partition = tmp_path / "t-0"
    os.mkfifo(partition / "00000000000000000100.log")  # the .log an index dump reads beside it
    shutil.copy(partition / "00000000000000000000.index", partition / "00000000000000000100.index")
    cases = {
        str(fifo): f"kafkalog: error: {fifo}: not a regular file (a FIFO); kafkalog dump reads only regular files\n",
        str(tmp_path): f"kafkalog: error: {tmp_path}: not a regular file (a directory); kafkalog dump reads only "
                       "regular files\n",
        # Met while dumping: Kafka's tool reports an error in a file it dumps in this form.
        f"{partition}/00000000000000000100.index": f"Error dumping {partition}/00000000000000000100.index: "
                                                   f"{partition}/00000000000000000100.log: not a regular file (a "
                                                   "FIFO); kafkalog dump reads only regular files\n",
    }
    for files, message in cases.items():
        done = subprocess.run([sys.executable, "-m", "kafkalog.cli", "dump", "--files", files],
                              capture_output=True, text=True, timeout=60)
        said = done.stdout.replace(f"Dumping {files}\n", "")  # an index's sibling is met after its name is printed
        assert (done.returncode, said, done.stderr) == (1, "", message), files


def _full_disk_lines() -> str:
    return "".join(f"key-{i}:" + "v" * 100 + f"{i}\n" for i in range(3000))


def test_a_full_disk_during_produce_leaves_whole_batches_and_says_what_landed(tmp_path: Path) -> None:
    """On a 256 KiB tmpfs, 3,000 records of ~110 bytes in batches of 500 do not fit. Before: exit 1 with
    "No space left on device", the records that fit plus a torn batch, and no word of which landed."""
    mounted = tmp_path / "small"
    mounted.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mounted)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        if os.environ.get("CI") == "true" and os.geteuid() == 0:
            pytest.fail(f"cannot mount a tmpfs as root: {mount.stderr}")
        pytest.skip(f"mounting a tmpfs is not permitted here: {mount.stderr.strip()}")
    try:
        log_dir = mounted / "logs"
        assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", "t").code == 0
        done = run_cli("produce", "--log-dir", str(log_dir), "--topic", "t", "--key-separator", ":",
                       "--partition", "0", stdin=_full_disk_lines())
        segment = log_dir / "t-0" / "00000000000000000000.log"
        said = re.fullmatch(rf"kafkalog: error: No space left on device: {segment}; (\d+) of 3000 records were "
                            r"produced \(t-0 offsets 0-(\d+)\) and the rest were not; no partial batch was left\n",
                            done.err)
        assert done.code == 1 and said is not None, done.err
        landed = int(said[1])
        assert 0 < landed < 3000 and int(said[2]) == landed - 1 and landed % 500 == 0
        assert run_cli("verify", "--log-dir", str(log_dir)).code == 0  # no torn batch
        got = run_cli("consume", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--print-offset")
        assert got.code == 0 and [int(line.split("\t")[0]) for line in got.out.splitlines()] == list(range(landed))
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


def test_a_short_write_then_enospc_is_cut_back_to_the_last_whole_batch(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The same, injected: the disk takes the first batch, half the second (a short write), then nothing."""
    assert run_cli("topics", "create", "--log-dir", str(tmp_path), "--topic", "t").code == 0
    real_write = os.write
    calls = []

    def filling_disk(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, data)
        if len(calls) == 2:
            return real_write(fd, bytes(data)[:len(data) // 2])
        raise OSError(28, "No space left on device")

    segment = tmp_path / "t-0" / "00000000000000000000.log"
    before = tree_digest(tmp_path)
    monkeypatch.setattr(os, "write", filling_disk)
    done = run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--key-separator", ":", "--partition", "0",
                   stdin=_full_disk_lines())
    monkeypatch.setattr(os, "write", real_write)
    assert (done.code, done.err) == (1, f"kafkalog: error: No space left on device: {segment}; 500 of 3000 records "
                                        "were produced (t-0 offsets 0-499) and the rest were not; no partial batch "
                                        "was left\n")
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0
    got = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--print-offset")
    assert [int(line.split("\t")[0]) for line in got.out.splitlines()] == list(range(500))
    assert tree_digest(tmp_path) != before  # what landed stays: a retry appends the rest after it
