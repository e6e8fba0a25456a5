"""Transaction tracking while cleaning (``CleanedTransactionMetadata``, spec §8.6.3).

Decides, batch by batch in offset order, which data batches belong to aborted transactions (their
records go) and when a COMMIT/ABORT marker may go (once no batch of its transaction is left). The
aborted transactions whose data this pass still had to remove are collected for the cleaned
segment's ``.txnindex``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from kafkalog.format.batch import ControlType
from kafkalog.log.txn_index import AbortedTxn


@dataclass
class _Ongoing:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


class TxnTracker:
    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self._heap: list[tuple[int, int, AbortedTxn]] = []
        self._ongoing_aborted: dict[int, _Ongoing] = {}
        self._ongoing_committed: set[int] = set()
        self.cleaned_index_entries: list[AbortedTxn] = []
        self.add_aborted(aborted)

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._heap, (txn.first_offset, len(self._heap), txn))

    def _consume_up_to(self, offset: int) -> None:
        while self._heap and self._heap[0][0] <= offset:
            _, _, txn = heapq.heappop(self._heap)
            self._ongoing_aborted.setdefault(txn.producer_id, _Ongoing(txn))

    def on_batch_read(self, producer_id: int, is_transactional: bool, last_offset: int) -> bool:
        """A data batch: True when it belongs to an aborted transaction (its records may go)."""
        self._consume_up_to(last_offset)
        if not is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is not None:
            ongoing.last_observed_batch_offset = last_offset
            return True
        self._ongoing_committed.add(producer_id)
        return False

    def on_control_batch_read(self, producer_id: int, last_offset: int, control_type: int | None) -> bool:
        """A control batch (``control_type`` None when it holds no record): True when it may go."""
        self._consume_up_to(last_offset)
        if control_type is None:
            return True  # an already-emptied marker
        if control_type == ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing.last_observed_batch_offset is not None:
                self.cleaned_index_entries.append(ongoing.txn)
                return False
            return True
        if control_type == ControlType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False
