"""The transaction index (``<base_offset>.txnindex``, spec §6): aborted transactions of one segment.

The file is a flat array of 34-byte entries, big-endian, no header::

    offset  size  field
    0       2     version             int16, 0 (readers look at byte 0 only, see below)
    2       8     producer_id         int64
    10      8     first_offset        int64, may lie in an earlier segment
    18      8     last_offset         int64, offset of the ABORT marker (in this segment)
    26      8     last_stable_offset  int64, the LSO right after the abort completed

Entries are in strictly increasing ``last_offset`` order. The file is created on the first append and
is never preallocated, so its length is always a whole number of entries.

Quirk kept from Kafka: the reader takes the version from the single byte at offset 0 (a signed Java
byte, the high byte of the int16) and rejects only values above 0.

Crash story: an append is one ``write`` to the end of the file; a crash can leave a partial last entry,
which :meth:`TransactionIndex.entries` reports as corruption. Kafka rebuilds this index with the
segment during recovery, so the caller's fix is to rebuild, not to repair.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.log.checkpoint import StrPath

ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
assert ENTRY_SIZE == 34


@dataclass(frozen=True)
class AbortedTxn:
    """One aborted transaction, as stored in a ``.txnindex`` entry."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION

    def encode(self) -> bytes:
        return _ENTRY.pack(self.version, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


class TxnIndexSearchResult(NamedTuple):
    """What :meth:`TransactionIndex.collect_aborted_txns` found; unpacks as ``(txns, is_complete)``."""

    aborted_transactions: list[AbortedTxn]
    # True when a later segment cannot hold more relevant aborts, so the search can stop here.
    is_complete: bool


def format_dump_line(txn: AbortedTxn) -> str:
    """One line of ``kafka-dump-log --files <base>.txnindex`` output."""
    return (f"version: {txn.version} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
            f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}")


class TransactionIndex:
    """The ``.txnindex`` file of the segment starting at ``base_offset``.

    No file handle is kept open: aborts are rare and every operation reopens the file, which keeps
    renames and deletes by other code (segment swap, retention) safe.
    """

    def __init__(self, path: StrPath, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        # The last entry's last_offset, loaded from the file on first need; None when there is no entry.
        self._last_offset: int | None = None
        self._last_offset_known = False
        self._in_memory: list[AbortedTxn] | None = None  # a read-only rebuild's entries, in place of the file

    def __repr__(self) -> str:
        return f"TransactionIndex(path={str(self.path)!r}, base_offset={self.base_offset})"

    # -- reading -----------------------------------------------------------------------------------

    def entries(self) -> list[AbortedTxn]:
        """All entries in file order; a missing file has none."""
        if self._in_memory is not None:
            return list(self._in_memory)
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        if len(data) % ENTRY_SIZE:
            raise CorruptIndexError(
                f"{self.path}: transaction index size {len(data)} is not a multiple of {ENTRY_SIZE} "
                f"(partial entry at byte {len(data) - len(data) % ENTRY_SIZE}); rebuild the index")
        result = []
        for position in range(0, len(data), ENTRY_SIZE):
            version = int.from_bytes(data[position:position + 1], "big", signed=True)
            if version > ABORTED_TXN_VERSION:
                raise CorruptIndexError(
                    f"{self.path}: aborted transaction version {version} at byte {position} is newer "
                    f"than the supported version {ABORTED_TXN_VERSION}")
            _, producer_id, first_offset, last_offset, lso = _ENTRY.unpack_from(data, position)
            result.append(AbortedTxn(producer_id, first_offset, last_offset, lso, version))
        return result

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        ``is_complete`` is set at the first entry whose LSO reaches the upper bound: every transaction
        aborted later in the log started at or after that LSO, so it cannot overlap the range.
        """
        found = []
        for txn in self.entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """Raise :class:`CorruptIndexError` if an entry's marker lies before this segment."""
        for position, txn in enumerate(self.entries()):
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"{self.path}: entry at byte {position * ENTRY_SIZE} ({txn}) has last offset "
                    f"{txn.last_offset} below the segment base offset {self.base_offset}; rebuild the index")

    def use_in_memory(self, entries: list[AbortedTxn]) -> None:
        """Serve ``entries`` instead of the file: what a rebuild would write, for a read-only view."""
        self._in_memory = list(entries)

    # -- writing -----------------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Append an entry; its ``last_offset`` must exceed the previous entry's."""
        if txn.version != ABORTED_TXN_VERSION:
            raise ValueError(f"only version {ABORTED_TXN_VERSION} entries can be written, got {txn}")
        last_offset = self._current_last_offset()
        if last_offset is not None and txn.last_offset <= last_offset:
            raise InvalidOffsetError(
                f"{self.path}: last offset {txn.last_offset} of appended transaction {txn} is not greater "
                f"than the index's current last offset {last_offset}")
        with open(self.path, "ab") as f:
            f.write(txn.encode())
        self._last_offset = txn.last_offset
        self._last_offset_known = True

    def truncate_to(self, offset: int) -> None:
        """Drop the first entry with ``last_offset >= offset`` and every entry after it."""
        previous: int | None = None
        for position, txn in enumerate(self.entries()):
            if txn.last_offset >= offset:
                os.truncate(self.path, position * ENTRY_SIZE)
                self._last_offset, self._last_offset_known = previous, True
                return
            previous = txn.last_offset

    def reset(self) -> None:
        """Remove every entry; a file that does not exist is not created."""
        if self.path.exists():
            os.truncate(self.path, 0)
        self._last_offset, self._last_offset_known = None, True

    def flush(self) -> None:
        """fsync the file, if it exists, so appended entries survive a power loss."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete_if_exists(self) -> bool:
        """Delete the file; return whether there was one."""
        self._last_offset, self._last_offset_known = None, True
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    @staticmethod
    def format_dump_line(txn: AbortedTxn) -> str:
        """Same as the module-level :func:`format_dump_line`."""
        return format_dump_line(txn)

    def _current_last_offset(self) -> int | None:
        # Kafka forgets the last offset when an index is reopened and so accepts an out-of-order
        # append after a restart; reading it back from the file keeps the order check honest.
        if not self._last_offset_known:
            existing = self.entries()
            self._last_offset = existing[-1].last_offset if existing else None
            self._last_offset_known = True
        return self._last_offset
