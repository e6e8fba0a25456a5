"""The cleaner's key map against a Python dict: exact keys of every length, growth, supersession
bitmap, saved maps and maps in parts that share the keys by hash."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from kafkalog.errors import CleanerError
from kafkalog.format.batch import Record, assemble_batch, build_batch
from kafkalog.format.scan import RecordColumns, record_sections, scan_batches, scan_records
from kafkalog.maintenance.key_map import HashedKeyMap, KeyMap


def _columns(keys: list[bytes | None], first_offset: int) -> RecordColumns:
    raw = b"".join(build_batch([Record(first_offset + i + j, 0, key, b"v") for j, key in enumerate(keys[i:i + 50])])
                   for i in range(0, len(keys), 50))
    return scan_records(raw, scan_batches(raw))


def _random_keys(rng: random.Random, count: int, distinct: int) -> list[bytes | None]:
    # Lengths around the 8- and 16-byte word boundaries the table handles separately, long keys that
    # share long prefixes (equality must be decided on every byte), an empty key and null keys.
    pool: list[bytes | None] = [b"", None]
    for i in range(distinct):
        length = rng.choice([1, 7, 8, 9, 15, 16, 17, 24, 40, 300])
        pool.append((b"p" * 200 + i.to_bytes(4, "big") * 80)[-length:] if length > 16 else
                    i.to_bytes(4, "big")[:length] + bytes(rng.randrange(256) for _ in range(max(0, length - 4))))
    return [rng.choice(pool) for _ in range(count)]


@pytest.fixture(scope="module")
def segments() -> list[tuple[list[bytes | None], RecordColumns]]:
    rng = random.Random(7)
    out = []
    offset = 1000
    for count in (3000, 4000, 2500):
        keys = _random_keys(rng, count, 700)
        out.append((keys, _columns(keys, offset)))
        offset += count
    return out


def _expected(segments: list[tuple[list[bytes | None], RecordColumns]]) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for keys, columns in segments:
        for i, key in enumerate(keys):
            if key is not None:
                latest[key] = int(columns.offset[i])
    return latest


def _build(parts: list[tuple[list[bytes | None], RecordColumns]], tracked: tuple[int, int], part: int = 0,
           of: int = 1) -> KeyMap:
    key_map = KeyMap(capacity=16, tracked=tracked, part=part, parts=of)  # tiny: every insert grows it
    for _, columns in parts:
        key_map.add(columns, np.flatnonzero(columns.key_len >= 0))
    return key_map


def test_lookup_and_supersession_equal_a_dict(segments: list[tuple[list[bytes | None], RecordColumns]]) -> None:
    latest = _expected(segments)
    key_map = _build(segments, (1000, 1000 + 9500))
    assert len(key_map) == len(latest) > 600
    for keys, columns in segments:
        rows = np.flatnonzero(columns.key_len >= 0)
        want = np.array([latest[keys[r]] for r in rows])
        assert np.array_equal(key_map.lookup(columns, rows), want)
        superseded = want > columns.offset[rows]
        assert superseded.any() and not superseded.all()
        # From the bitmap (rows inserted) and from lookups (rows said not to be): the same answer.
        assert np.array_equal(key_map.superseded(columns, rows, np.ones(len(rows), dtype=bool)), superseded)
        assert np.array_equal(key_map.superseded(columns, rows, np.zeros(len(rows), dtype=bool)), superseded)


def test_absent_keys_are_not_found(segments: list[tuple[list[bytes | None], RecordColumns]]) -> None:
    key_map = _build(segments[:1], (1000, 4000))
    other = _columns([b"absent-" + bytes([i]) * i for i in range(40)] + [b"p" * 300], 50_000)
    rows = np.arange(len(other))
    assert (key_map.lookup(other, rows) == -1).all()
    assert not key_map.superseded(other, rows, np.zeros(len(rows), dtype=bool)).any()


@pytest.mark.parametrize("of", [1, 2, 3, 5])
def test_saved_hashed_parts_answer_as_the_whole_map(
        segments: list[tuple[list[bytes | None], RecordColumns]], tmp_path: Path, of: int) -> None:
    whole = _build(segments, (1000, 10_500))
    whole.update_latest_offset(10_499)
    parts = []
    for i in range(of):
        part = _build(segments, (1000, 10_500), i, of)
        part.update_latest_offset(10_499)
        part.save(tmp_path / f"part-{i}")
        parts.append(KeyMap.load(tmp_path / f"part-{i}"))
    # The parts hold disjoint keys, every key of the whole map once, and share the records among them.
    assert sum(len(p) for p in parts) == len(whole)
    assert sum(p.records for p in parts) == whole.records
    if of > 1:
        assert all(0.5 * len(whole) / of < len(p) < 1.5 * len(whole) / of for p in parts)
    hashed = HashedKeyMap(list(reversed(parts)), whole.latest_offset)  # any order
    assert len(hashed) == len(whole) and hashed.records == whole.records
    for _, columns in segments:
        rows = np.flatnonzero(columns.key_len >= 0)
        assert np.array_equal(hashed.lookup(columns, rows), whole.lookup(columns, rows))
        everything = np.ones(len(rows), dtype=bool)
        expected = whole.superseded(columns, rows, everything)
        assert expected.any() and not expected.all()
        assert np.array_equal(hashed.superseded(columns, rows, everything), expected)
        assert np.array_equal(hashed.superseded(columns, rows, ~everything), expected)
        if of > 1:  # one part's bitmap knows only its own keys
            with pytest.raises(ValueError):
                parts[0].superseded(columns, rows, everything)


def test_hashed_parts_of_different_maps_are_refused(segments: list[tuple[list[bytes | None], RecordColumns]]) -> None:
    with pytest.raises(CleanerError, match="not the hashed parts of one map"):
        HashedKeyMap([], 10_499)
    with pytest.raises(CleanerError, match="not the hashed parts of one map"):
        HashedKeyMap([_build(segments, (1000, 10_500), 0, 2)], 10_499)
    with pytest.raises(CleanerError, match="not the hashed parts of one map"):
        HashedKeyMap([_build(segments, (1000, 10_500), 0, 2), _build(segments, (2000, 10_500), 1, 2)], 10_499)


def _varint_bytes(zigzag: int, width: int) -> bytes:
    """``zigzag`` as a varint of exactly ``width`` bytes (continuation bits on all but the last)."""
    return bytes(((zigzag >> (7 * i)) & 0x7F) | (0x80 if i + 1 < width else 0) for i in range(width))


def test_map_pass_reads_record_framing_as_the_record_decoder() -> None:
    # Offset deltas and key lengths written as 5-byte varints with bits past 31 set: Java ints, whose
    # extra bits Kafka's reader drops. Hashing straight from the bytes must read the same offsets and
    # keys as scan_records, or the map would answer for records the rewrite pass never sees.
    body = b""
    keys = [b"alpha", b"beta", b"alpha", b"gamma-long-key-over-16-bytes"]
    for delta, key in enumerate(keys):
        fields = (b"\x00" + b"\x00" + _varint_bytes((delta << 1) | (1 << 33), 5)
                  + _varint_bytes((len(key) << 1) | (1 << 34), 5) + key + b"\x01" + b"\x00")
        body += bytes([len(fields) << 1]) + fields
    raw = assemble_batch(500, 0, 0, len(keys) - 1, 7, 7, -1, -1, -1, len(keys), body)
    batches = scan_batches(raw)
    columns = scan_records(raw, batches)
    assert [int(o) for o in columns.offset] == [500, 501, 502, 503]
    assert [columns.key(i) for i in range(len(columns))] == keys

    from_bytes = KeyMap(tracked=(500, 504))
    assert from_bytes.add_sections(record_sections(raw, batches), batches.base_offset, 500, 504) == -1
    from_columns = KeyMap(tracked=(500, 504))
    from_columns.add(columns, np.arange(len(columns)))
    rows = np.arange(len(columns))
    assert [int(o) for o in from_bytes.lookup(columns, rows)] == [502, 501, 502, 503]
    assert np.array_equal(from_bytes.lookup(columns, rows), from_columns.lookup(columns, rows))
    everything = np.ones(len(rows), dtype=bool)
    assert np.array_equal(from_bytes.superseded(columns, rows, everything),
                          from_columns.superseded(columns, rows, everything))


def _answers_as_expected(key_map: KeyMap, segments: list[tuple[list[bytes | None], RecordColumns]]) -> None:
    latest = _expected(segments)
    assert len(key_map) == len(latest)
    for keys, columns in segments:
        rows = np.flatnonzero(columns.key_len >= 0)
        want = np.array([latest[keys[r]] for r in rows])
        assert np.array_equal(key_map.lookup(columns, rows), want)
        assert np.array_equal(key_map.superseded(columns, rows, np.ones(len(rows), dtype=bool)),
                              want > columns.offset[rows])


def test_a_map_grown_through_rehashes_answers_every_key(segments: list[tuple[list[bytes | None], RecordColumns]],
                                                          ) -> None:
    key_map = _build(segments, (1000, 1000 + 9500))
    assert len(key_map._table) > 1 << 10  # grown from its first table
    _answers_as_expected(key_map, segments)
