"""The offset index (``.index``, spec §4) and the time index (``.timeindex``, spec §5).

On disk both are flat arrays of big-endian entries with no header:

    .index      8 bytes:  int32 relative offset | int32 position of a batch in the .log
    .timeindex  12 bytes: int64 timestamp       | int32 relative offset

Kafka preallocates the active segment's index files (10 MiB of zeros) and trims them on roll and
close; a broker killed mid-flight leaves the zeros behind. kafkalog reads such files by stopping at
the first unused slot (an entry after the first whose relative offset is 0, the rule
``kafka-dump-log`` uses), and writes its own index files append-only, always trimmed, so a crash
can leave at most a torn last entry, which the sanity check (length not a multiple of the entry
size) turns into a rebuild. Capacity (``is_full``) still follows ``segment.index.bytes``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from kafkalog.errors import CorruptIndexError, InvalidOffsetError

DEFAULT_MAX_INDEX_BYTES = 10 * 1024 * 1024
MAX_INT = (1 << 31) - 1
_OFFSET_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
_TIME_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


class _Index:
    """What both indexes share: loading, the unused-slot rule, appends, truncation, lookups."""

    dtype: np.dtype = _OFFSET_DTYPE
    key: str = "relative_offset"
    all_zero_first_slot_is_unused = False

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int = DEFAULT_MAX_INDEX_BYTES):
        self.path = Path(path)
        self.base_offset = base_offset
        self.entry_size = self.dtype.itemsize
        self.max_entries = max_index_bytes // self.entry_size
        self._file: BinaryIO | None = None
        raw = self.path.read_bytes() if self.path.exists() else b""
        self.file_length = len(raw)
        usable = len(raw) - len(raw) % self.entry_size
        entries = np.frombuffer(raw[:usable], dtype=self.dtype)
        # Preallocated slots Kafka never wrote are zeros: an entry after the first with relative
        # offset 0 cannot be real, because relative offsets strictly increase.
        unused = np.flatnonzero(entries["relative_offset"][1:] == 0)
        if len(unused):
            entries = entries[: int(unused[0]) + 1]
        if self.all_zero_first_slot_is_unused and len(entries) and not entries[0].tobytes().strip(b"\0"):
            # A preallocated time index with no entry at all; read as (0, base) it would claim the
            # segment's newest record is from 1970 and time retention would delete it.
            entries = entries[:0]
        self._entries: npt.NDArray[np.void] = entries.copy()
        self.preallocated_bytes = len(raw) - len(self._entries) * self.entry_size

    # --- reading -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> npt.NDArray[np.void]:
        return self._entries

    @property
    def is_full(self) -> bool:
        return len(self._entries) >= self.max_entries

    def _keys(self) -> npt.NDArray[np.int64]:
        return self._entries[self.key].astype(np.int64)

    def largest_lower_bound_slot(self, target: int) -> int:
        """Slot of the largest entry whose key is ≤ target, or -1 (``largestLowerBoundSlot``).

        Kafka searches a "warm" tail first to keep page faults down; over strictly increasing keys
        the answer is the same as one binary search over all of them.
        """
        return int(np.searchsorted(self._keys(), target, side="right")) - 1

    # --- writing -------------------------------------------------------------------------------
    def _write_entry(self, entry: npt.NDArray[np.void]) -> None:
        if self.is_full:
            raise CorruptIndexError(
                f"attempt to append to a full index {self.path} (size = {len(self._entries)})"
            )
        if self._file is None:
            self._trim_file()
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open across appends
        self._file.write(entry.tobytes())
        self._entries = np.concatenate([self._entries, entry])
        self.file_length = len(self._entries) * self.entry_size

    def _trim_file(self) -> None:
        """Drop a Kafka preallocated zero tail (or a torn entry) before writing after it."""
        expected = len(self._entries) * self.entry_size
        if self.path.exists() and self.path.stat().st_size != expected:
            os.truncate(self.path, expected)
        self.file_length = expected
        self.preallocated_bytes = 0

    def write_entries(self, first: npt.NDArray[np.int64], second: npt.NDArray[np.int64]) -> None:
        """Append many entries at once (a rebuild), given as their two fields with absolute offsets
        (offset, position / timestamp, offset); callers guarantee their order."""
        if not len(first):
            return
        arr = self._encode(first.astype(np.int64), second.astype(np.int64))
        if len(self._entries) + len(arr) > self.max_entries + (1 if self.key == "timestamp" else 0):
            raise CorruptIndexError(f"attempt to append {len(arr)} entries to {self.path}, beyond its capacity")
        self.close()
        self._trim_file()
        with open(self.path, "ab") as f:
            f.write(arr.tobytes())
        self._entries = np.concatenate([self._entries, arr])
        self.file_length = len(self._entries) * self.entry_size

    def _encode(self, first: npt.NDArray[np.int64], second: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
        raise NotImplementedError

    def truncate_to_entries(self, count: int) -> None:
        self.close()
        self._entries = self._entries[:count].copy()
        if self.path.exists():
            self._trim_file()

    def truncate_to(self, offset: int) -> None:
        """Drop entries at or after ``offset``: Kafka's three cases (none ≤ it: all go; an entry equal
        to it: that one and later go; else keep up to the largest below). Both indexes search on the
        offset column here (the time index's ``truncateTo`` does too)."""
        relative = offset - self.base_offset
        offsets = self._entries["relative_offset"].astype(np.int64)
        slot = int(np.searchsorted(offsets, relative, side="right")) - 1
        if slot < 0:
            keep = 0
        elif int(offsets[slot]) == relative:
            keep = slot
        else:
            keep = slot + 1
        self.truncate_to_entries(keep)

    def reset(self) -> None:
        """Empty the index (recovery rebuilds it from the log)."""
        self.truncate_to_entries(0)

    def forget_entries(self) -> None:
        """Treat the index as empty in memory only (a read-only view of a corrupt index)."""
        self._entries = self._entries[:0]

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def trim(self) -> None:
        """Make the file exactly ``entries * entry_size`` bytes (on roll and close)."""
        self.close()
        if self.path.exists():
            self._trim_file()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def _relative_all(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        relative = offsets - self.base_offset
        bad = np.flatnonzero((relative < 0) | (relative > MAX_INT))
        if len(bad):
            self._relative(int(offsets[bad[0]]))  # raises the error
        return relative

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= MAX_INT:
            raise InvalidOffsetError(
                f"offset {offset} is out of range for the index {self.path} (base offset {self.base_offset})"
            )
        return relative


class OffsetIndex(_Index):
    """Sparse map from offsets to ``.log`` positions (``OffsetIndex``)."""

    dtype = _OFFSET_DTYPE
    key = "relative_offset"

    @property
    def last_offset(self) -> int:
        if not len(self._entries):
            return self.base_offset
        return self.base_offset + int(self._entries[-1]["relative_offset"])

    def entry(self, slot: int) -> tuple[int, int]:
        e = self._entries[slot]
        return self.base_offset + int(e["relative_offset"]), int(e["position"])

    def _encode(self, first: npt.NDArray[np.int64], second: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
        out = np.empty(len(first), dtype=self.dtype)  # (offset, position)
        out["relative_offset"], out["position"] = self._relative_all(first), second
        return out

    def append(self, offset: int, position: int) -> None:
        if len(self._entries) and offset <= self.last_offset:
            raise InvalidOffsetError(
                f"attempt to append an offset ({offset}) no larger than the last offset appended "
                f"({self.last_offset}) to {self.path}"
            )
        self._write_entry(np.array([(self._relative(offset), position)], dtype=self.dtype))

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry ≤ target, or (base offset, 0)."""
        slot = self.largest_lower_bound_slot(target_offset - self.base_offset)
        return (self.base_offset, 0) if slot < 0 else self.entry(slot)

    def fetch_upper_bound_offset(self, start_position: int, fetch_size: int) -> tuple[int, int] | None:
        """The smallest entry whose position is ≥ start + size (``fetchUpperBoundOffset``)."""
        positions = self._entries["position"].astype(np.int64)
        slot = int(np.searchsorted(positions, start_position + fetch_size, side="left"))
        return None if slot >= len(positions) else self.entry(slot)

    def sanity_check(self) -> None:
        if self.file_length % self.entry_size:
            raise CorruptIndexError(
                f"index file {self.path} is corrupt, found {self.file_length} bytes which is neither "
                f"positive nor a multiple of {self.entry_size}"
            )
        if len(self._entries) and self.last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt index found, index file ({self.path}) has non-zero size but the last offset "
                f"is {self.last_offset} which is less than the base offset {self.base_offset}"
            )
        # Beyond Kafka's check: entries must go up in offset and position, from position 0 on, or a
        # lookup lands in the wrong place (a reader would start at the wrong offset).
        offsets = self._entries["relative_offset"].astype(np.int64)
        positions = self._entries["position"].astype(np.int64)
        if len(positions) and (positions[0] < 0 or (np.diff(offsets) <= 0).any() or (np.diff(positions) <= 0).any()):
            raise CorruptIndexError(f"index file {self.path} is corrupt: its entries do not increase in offset "
                                    "and position from position 0")


class TimeIndex(_Index):
    """Map from max timestamps to offsets (``TimeIndex``); full one entry early (spec §5.2)."""

    dtype = _TIME_DTYPE
    key = "timestamp"
    all_zero_first_slot_is_unused = True

    @property
    def is_full(self) -> bool:
        return len(self._entries) >= self.max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty."""
        if not len(self._entries):
            return -1, self.base_offset
        return self.entry(len(self._entries) - 1)

    def entry(self, slot: int) -> tuple[int, int]:
        e = self._entries[slot]
        return int(e["timestamp"]), self.base_offset + int(e["relative_offset"])

    def _encode(self, first: npt.NDArray[np.int64], second: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
        out = np.empty(len(first), dtype=self.dtype)  # (timestamp, offset)
        out["timestamp"], out["relative_offset"] = first, self._relative_all(second)
        return out

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append only when the timestamp is strictly larger than the last entry's."""
        last_timestamp, last_offset = self.last_entry()
        if not skip_full_check and self.is_full:
            raise CorruptIndexError(f"attempt to append to a full time index {self.path}")
        if len(self._entries) and offset < last_offset:
            raise InvalidOffsetError(
                f"attempt to append an offset ({offset}) to slot {len(self._entries)} no larger than the "
                f"last offset appended ({last_offset}) to {self.path}"
            )
        if len(self._entries) and timestamp < last_timestamp:
            raise InvalidOffsetError(
                f"attempt to append a timestamp ({timestamp}) to slot {len(self._entries)} no larger than "
                f"the last timestamp appended ({last_timestamp}) to {self.path}"
            )
        if timestamp > last_timestamp:
            entry = np.array([(timestamp, self._relative(offset))], dtype=self.dtype)
            if skip_full_check and self.is_full:
                self.max_entries += 1  # the slot reserved for the final roll entry
            self._write_entry(entry)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp ≤ target, or (-1, base offset)."""
        slot = self.largest_lower_bound_slot(timestamp)
        return (-1, self.base_offset) if slot < 0 else self.entry(slot)


    def sanity_check(self) -> None:
        if self.file_length % self.entry_size:
            raise CorruptIndexError(
                f"time index file {self.path} is corrupt, found {self.file_length} bytes which is not "
                f"a multiple of {self.entry_size}"
            )
        if not len(self._entries):
            return
        last_timestamp, last_offset = self.last_entry()
        first_timestamp = int(self._entries[0]["timestamp"])
        if last_timestamp < first_timestamp:
            raise CorruptIndexError(
                f"corrupt time index found, time index file ({self.path}) has non-zero size but the last "
                f"timestamp is {last_timestamp} which is less than the first timestamp {first_timestamp}"
            )
        if last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt time index found, time index file ({self.path}) has non-zero size but the last "
                f"offset is {last_offset} which is less than the base offset {self.base_offset}"
            )


def encode_offset_index(entries: list[tuple[int, int]], base_offset: int) -> bytes:
    """Bytes of an offset index holding absolute (offset, position) entries."""
    arr = np.array([(o - base_offset, p) for o, p in entries], dtype=_OFFSET_DTYPE)
    return arr.tobytes()


def encode_time_index(entries: list[tuple[int, int]], base_offset: int) -> bytes:
    """Bytes of a time index holding (timestamp, absolute offset) entries."""
    arr = np.array([(t, o - base_offset) for t, o in entries], dtype=_TIME_DTYPE)
    return arr.tobytes()
