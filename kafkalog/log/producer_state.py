"""Producer state of one partition, rebuilt from batch headers (a slim ``ProducerStateManager``).

The log keeps, per producer id, the last batch's epoch, sequence, offset and timestamp, and the first
offset of its open transaction. That is what producer snapshots store (spec §7), what the cleaner
needs to keep each producer's last batch, and what turns an ABORT marker into a ``.txnindex`` entry
with its last stable offset (spec §6). Idempotence checks (sequence gaps, fencing) are the broker's
business and are not enforced here.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkalog.format.batch import ControlType
from kafkalog.log.producer_snapshot import ProducerSnapshotEntry
from kafkalog.log.txn_index import AbortedTxn

NO_COORDINATOR_EPOCH = -1


@dataclass(frozen=True, slots=True)
class BatchSummary:
    """The header facts of one batch that producer state depends on."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool
    control_type: int | None = None  # ControlType of a control batch's record, else None
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    is_control: bool = False  # a control batch, with or without its record


class ProducerState:
    """Producer id → last known state; fed batch by batch in offset order."""

    def __init__(self, entries: list[ProducerSnapshotEntry] | None = None) -> None:
        self.producers: dict[int, ProducerSnapshotEntry] = {e.producer_id: e for e in entries or ()}

    def ongoing_first_offsets(self) -> list[int]:
        return sorted(e.current_txn_first_offset for e in self.producers.values()
                      if e.current_txn_first_offset >= 0)

    def first_unstable_offset(self) -> int | None:
        ongoing = self.ongoing_first_offsets()
        return ongoing[0] if ongoing else None

    def update(self, batch: BatchSummary) -> AbortedTxn | None:
        """Apply one batch (``ProducerAppendInfo.append``); return the aborted transaction an ABORT
        marker completes, if any."""
        if batch.producer_id < 0:
            return None
        if batch.is_control and batch.control_type is None:
            # An emptied marker: the cleaner removed its whole transaction, there is nothing to end. The
            # producer is known from here on, with nothing else known of it (``ProducerStateEntry.empty``).
            self.producers.setdefault(batch.producer_id, ProducerSnapshotEntry(
                producer_id=batch.producer_id, producer_epoch=-1, last_sequence=-1, last_offset=-1, offset_delta=0,
                timestamp_ms=-1, coordinator_epoch=NO_COORDINATOR_EPOCH, current_txn_first_offset=-1))
            return None
        previous = self.producers.get(batch.producer_id)
        txn_first = previous.current_txn_first_offset if previous else -1
        # A new epoch forgets the producer's last batch (``maybeUpdateProducerEpoch``).
        kept = previous if previous is not None and previous.producer_epoch == batch.producer_epoch else None
        if batch.control_type is not None:
            # A marker ends the transaction; the last *data* batch (what the cleaner must keep for the
            # producer, Kafka's lastDataOffset) stays as it was, unless the epoch moved on.
            aborted = None
            if batch.control_type == ControlType.ABORT and txn_first >= 0:
                others = [e.current_txn_first_offset for pid, e in self.producers.items()
                          if pid != batch.producer_id and e.current_txn_first_offset >= 0]
                lso = min(others) if others else batch.last_offset + 1
                aborted = AbortedTxn(batch.producer_id, txn_first, batch.last_offset, lso)
            self.producers[batch.producer_id] = ProducerSnapshotEntry(
                producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                last_sequence=kept.last_sequence if kept else -1, last_offset=kept.last_offset if kept else -1,
                offset_delta=kept.offset_delta if kept else 0, timestamp_ms=batch.max_timestamp,
                coordinator_epoch=batch.coordinator_epoch, current_txn_first_offset=-1)
            return aborted
        if batch.is_transactional and txn_first < 0:
            txn_first = batch.first_offset
        self.producers[batch.producer_id] = ProducerSnapshotEntry(
            producer_id=batch.producer_id, producer_epoch=batch.producer_epoch, last_sequence=batch.last_sequence,
            last_offset=batch.last_offset, offset_delta=batch.last_offset - batch.first_offset,
            timestamp_ms=batch.max_timestamp,
            coordinator_epoch=previous.coordinator_epoch if previous else NO_COORDINATOR_EPOCH,
            current_txn_first_offset=txn_first)
        return None

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers idle for ``producer.id.expiration.ms`` with no transaction open
        (``removeExpiredProducers``): the cleaner no longer keeps their last batch."""
        self.producers = {pid: e for pid, e in self.producers.items()
                          if e.current_txn_first_offset >= 0 or now_ms - e.timestamp_ms < expiration_ms}

    def snapshot_entries(self) -> list[ProducerSnapshotEntry]:
        return [self.producers[pid] for pid in sorted(self.producers)]

    def truncate_before(self, offset: int) -> None:
        """Forget producers whose last batch is entirely below ``offset`` (log start moved)."""
        self.producers = {pid: e for pid, e in self.producers.items()
                          if e.last_offset >= offset or e.current_txn_first_offset >= 0}
