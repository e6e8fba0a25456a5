"""Readers on damaged data (issue #35, item 6): a reader never skips records silently, and the repair
``verify`` advises is one that works.

The store: 400 records in batches of 10, segments of about 2 KB (0-109, 110-209, 210-309, 310-399) with
an offset-index entry every 100 bytes, so that ``recover``'s clean check (which, like Kafka's loader
after a clean shutdown, reads only past each segment's last index entry) does not read the damage.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest

SEGMENT = "00000000000000000110"  # the second segment: offsets 110-209


def _store(log_dir: Path) -> Path:
    assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", "t", "--config", "segment.bytes=2048",
                   "--config", "index.interval.bytes=100").code == 0
    lines = "".join(f"k{i % 20}:v{i}\n" for i in range(400))
    done = run_cli("produce", "--log-dir", str(log_dir), "--topic", "t", "--key-separator", ":",
                   "--batch-records", "10", stdin=lines)
    assert done.code == 0, done.err
    assert sorted(p.name for p in (log_dir / "t-0").glob("*.log"))[1] == f"{SEGMENT}.log"
    return log_dir / "t-0" / f"{SEGMENT}.log"


def _batch_starts(segment: Path) -> list[int]:
    data = segment.read_bytes()
    starts, position = [], 0
    while position < len(data):
        starts.append(position)
        position += 12 + int.from_bytes(data[position + 8:position + 12], "big")
    return starts


def _consume(log_dir: Path, *extra: str) -> tuple[int, list[int], str]:
    done = run_cli("consume", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--print-offset", *extra)
    return done.code, [int(line.split("\t")[0]) for line in done.out.splitlines()], done.err


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _damage(segment: Path, how: str) -> int:
    """Damage the segment's third batch (offsets 130-139); returns its byte position."""
    at = _batch_starts(segment)[2]
    data = bytearray(segment.read_bytes())
    if how == "length":  # one flipped bit: the batch now runs 1 MiB past the segment's end
        struct.pack_into(">i", data, at + 8, struct.unpack_from(">i", data, at + 8)[0] ^ 0x00100000)
        segment.write_bytes(bytes(data))
    else:  # cut short inside the batch
        segment.write_bytes(bytes(data[:at + 30]))
    return at


@pytest.mark.parametrize("how", ["length", "truncated"])
def test_a_reader_stops_at_an_old_segment_cut_short_and_verify_advises_what_repairs_it(
        tmp_path: Path, how: str) -> None:
    segment = _store(tmp_path)
    at = _damage(segment, how)
    left = segment.stat().st_size - at
    before = tree_digest(tmp_path)

    code, offsets, err = _consume(tmp_path)  # before: exit 0, offsets 130-209 skipped without a word
    assert (code, offsets) == (1, list(range(130)))
    assert err == (f"kafkalog: error: {segment}: incomplete batch at byte {at} (offset 130): the segment ends "
                   f"{left} bytes into it, and a later segment follows; the reader stops here rather than skip "
                   "records (`kafkalog verify` describes the damage)\n")
    # Started past the damage: the segment's index leads past a damaged length, not past a cut.
    after = (0, list(range(150, 400))) if how == "length" else (1, [])
    assert _consume(tmp_path, "--from-offset", "150")[:2] == after
    assert _consume(tmp_path, "--from-offset", "210", "--max-records", "2")[:2] == (0, [210, 211])
    assert _consume(tmp_path, "--max-records", "130")[:2] == (0, list(range(130)))

    verify = run_cli("verify", "--log-dir", str(tmp_path))
    assert verify.code == 1
    assert f"PROBLEM {segment}: {left} bytes of an incomplete batch at byte {at} (in a segment a later one " \
           "follows: damage, not a write in progress; `kafkalog recover --full` truncates the log there, as " \
           "Kafka's recovery would; what follows is lost)" in _lines(verify.out)

    damaged = segment.read_bytes()
    produce = run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--key-separator", ":", stdin="k:v\n")
    if how == "length":  # the loader's index check passes the segment: a writer leaves it unread, as Kafka's does
        assert produce.code == 0 and segment.read_bytes() == damaged
    else:
        # Its index points past the cut, so the loader recovers it; below the recovery point that is no torn
        # write, and a writer's load refuses it, changing nothing (before: produce cut the segment there, exit
        # 0, keeping the segments after it: offsets 130-209 gone from the middle of the log).
        assert produce.err == (f"kafkalog: error: {segment}: incomplete batch at byte {at} (offset 130), below the "
                               "recovery point 400: the records there were flushed whole, so this is damage, not a "
                               "torn write; nothing was changed (`kafkalog recover --full` truncates the log "
                               "there, as Kafka's recovery would; what follows is lost)\n")
        assert produce.code == 1 and tree_digest(tmp_path) == before

    # The advice works: the log ends at the damage, as Kafka's recovery leaves it.
    assert run_cli("recover", "--full", "--log-dir", str(tmp_path)).code == 0
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0
    assert _consume(tmp_path)[:2] == (0, list(range(130)))


def test_recover_without_full_does_not_read_an_old_segment_so_verify_does_not_advise_it(tmp_path: Path) -> None:
    """The issue's report: `verify` said `recover` truncates it, and `recover` found nothing to repair."""
    segment = _store(tmp_path)
    _damage(segment, "length")
    before = tree_digest(tmp_path)
    recover = run_cli("recover", "--log-dir", str(tmp_path))
    assert (recover.code, recover.out) == (0, "Recovered 1 partitions (0 needed repair).\n")
    assert tree_digest(tmp_path) == before
    assert "`kafkalog recover` truncates it" not in run_cli("verify", "--log-dir", str(tmp_path)).out


def _last_segment(log_dir: Path) -> Path:
    return sorted((log_dir / "t-0").glob("*.log"))[-1]


def test_a_torn_write_at_the_log_end_ends_a_reader_quietly_and_recover_cuts_it(tmp_path: Path) -> None:
    """Past the recovery point a writer may be appending: the whole batches are the log (its high watermark)."""
    _store(tmp_path)
    last = _last_segment(tmp_path)
    size = last.stat().st_size
    with last.open("ab") as f:
        f.write(last.read_bytes()[:40])  # half a batch, as a writer that died in its write leaves it
    code, offsets, err = _consume(tmp_path)
    assert (code, offsets, err) == (0, list(range(400)), "")
    verify = run_cli("verify", "--log-dir", str(tmp_path))
    assert f"PROBLEM {last}: 40 bytes of an incomplete batch at byte {size} (a torn write; `kafkalog recover` " \
           "truncates it)" in _lines(verify.out)
    assert run_cli("recover", "--log-dir", str(tmp_path)).code == 0
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0


def test_the_last_segment_cut_short_below_the_recovery_point_stops_a_reader(tmp_path: Path) -> None:
    """Records below the recovery point were flushed whole: a batch that ends past the file there is damage.
    It lies before the segment's last index entry, so only `recover --full` reads it."""
    _store(tmp_path)
    last = _last_segment(tmp_path)
    at = _damage(last, "length")  # offsets 330-339 of the segment 310-399
    code, offsets, err = _consume(tmp_path)
    assert (code, offsets) == (1, list(range(330)))
    assert err == (f"kafkalog: error: {last}: incomplete batch at byte {at} (offset 330): the segment ends "
                   f"{last.stat().st_size - at} bytes into it, below the recovery point, where every record was "
                   "flushed whole; the reader stops here rather than skip records (`kafkalog verify` describes "
                   "the damage)\n")
    verify = run_cli("verify", "--log-dir", str(tmp_path))
    assert f"PROBLEM {last}: {last.stat().st_size - at} bytes of an incomplete batch at byte {at} (in the active " \
           "segment: damage, not a write in progress; `kafkalog recover --full` truncates the log there, as " \
           "Kafka's recovery would; what follows is lost)" in _lines(verify.out)
    assert run_cli("recover", "--full", "--log-dir", str(tmp_path)).code == 0
    assert _consume(tmp_path)[:2] == (0, list(range(330)))


def test_records_before_a_corrupt_batch_are_served_then_the_reader_stops(tmp_path: Path) -> None:
    segment = _store(tmp_path)
    at = _batch_starts(segment)[2]
    data = bytearray(segment.read_bytes())
    data[at + 66] ^= 0xFF  # a record byte: the CRC no longer matches
    segment.write_bytes(bytes(data))
    code, offsets, err = _consume(tmp_path)
    assert (code, offsets) == (1, list(range(130)))  # before: 0-109, the whole chunk was withheld
    assert err.startswith(f"kafkalog: error: {segment}: record is corrupt at byte {at} (offset 130): stored crc = ")


@pytest.mark.parametrize("batch", [2, -1])
def test_a_base_offset_damaged_upwards_is_never_served(tmp_path: Path, batch: int) -> None:
    """No CRC covers a base offset: one raised shows only as the next batch going backwards (or, for a
    segment's last batch, as reaching the next segment's base offset), and then neither is served."""
    segment = _store(tmp_path)
    at = _batch_starts(segment)[batch]
    data = bytearray(segment.read_bytes())
    first = int.from_bytes(data[at:at + 8], "big")
    struct.pack_into(">q", data, at, first + 64)
    segment.write_bytes(bytes(data))
    code, offsets, err = _consume(tmp_path)
    assert code == 1 and offsets == list(range(first)), err  # before: offsets first+64... were served
    if batch == -1:
        assert err == (f"kafkalog: error: {segment}: batch at byte {at} ends at offset {first + 64 + 9}, not below "
                       "the next segment's base offset 210; `kafkalog recover --full` truncates the log there\n")
    else:
        assert err == (f"kafkalog: error: {segment}: batch at byte {_batch_starts(segment)[batch + 1]} starts at "
                       f"offset {first + 10}, not after offset {first + 64 + 9}; `kafkalog recover --full` "
                       "truncates the log there\n")


@pytest.mark.parametrize("chunk_bytes", [100, 300, 1000])
def test_chunk_boundaries_change_nothing_a_reader_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         chunk_bytes: int) -> None:
    """A batch held back for the next chunk is checked against that chunk's first batch: small chunks
    serve what one read serves, intact or damaged at any batch."""
    from kafkalog.log.segment import LogSegment
    from kafkalog.log.store import LogStore

    segment = _store(tmp_path)
    chunks = LogSegment.scan_chunks
    monkeypatch.setattr(LogSegment, "scan_chunks",
                        lambda self, start=0, chunk_bytes_=chunk_bytes, on_end=None: chunks(self, start, chunk_bytes_,
                                                                                            on_end))

    def served() -> tuple[list[int], str]:
        store = LogStore([tmp_path])
        log = store.open_log(store.locate("t", 0), read_only=True)
        offsets: list[int] = []
        try:
            for columns, row in log.read_records(0):
                offsets.append(int(columns.offset[row]))
        except Exception as exc:  # noqa: BLE001 - what stopped the reader is what is compared
            return offsets, str(exc)
        return offsets, ""

    assert served() == (list(range(400)), "")
    healthy = segment.read_bytes()
    for batch, at in enumerate(_batch_starts(segment)):
        data = bytearray(healthy)
        struct.pack_into(">q", data, at, 110 + 10 * batch + 64)  # the batch's base offset raised by 64
        segment.write_bytes(bytes(data))
        offsets, error = served()
        assert offsets == list(range(110 + 10 * batch)) and str(segment) in error, (batch, error)
    segment.write_bytes(healthy)
