"""Transaction tracking while cleaning (``CleanedTransactionMetadata``, spec §8.6.3).

Decides, batch by batch in offset order, which data batches belong to aborted transactions (their
records go) and when a COMMIT/ABORT marker may go (once no batch of its transaction is left). The
aborted transactions whose data this pass still had to remove are collected for the cleaned
segment's ``.txnindex``.

One tracker serves a whole cleaning round, across its segment groups, as in Kafka's ``doClean``: a
transaction whose data is in one group and whose marker is in a later one is followed from the one to
the other. A group written apart from the earlier ones (a Spark task) starts from the tracker's
:meth:`TxnTracker.state` at the group's first offset, which :meth:`TxnTracker.replay` computes from the
transactional batches of the earlier groups (``txn_events``) without rewriting them.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kafkalog.format.batch import ControlType
from kafkalog.log.txn_index import AbortedTxn

# ``txn_events`` rows are (kind, producer id, last offset); a kind >= 0 is a marker's control type.
TXN_DATA = -3  # a transactional data batch
EMPTY_CONTROL = -2  # a control batch without records (an emptied marker)
UNKNOWN_CONTROL = -1  # a control batch whose key does not parse
TxnEvents = npt.NDArray[np.int64]  # shape (n, 3)


@dataclass
class _Ongoing:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


class TxnTracker:
    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self._heap: list[tuple[int, int, AbortedTxn]] = []
        self._pushed = 0  # ties in the heap keep their push order
        self._ongoing_aborted: dict[int, _Ongoing] = {}
        self._ongoing_committed: set[int] = set()
        self.cleaned_index_entries: list[AbortedTxn] = []  # of the group being written
        self.add_aborted(aborted)

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._heap, (txn.first_offset, self._pushed, txn))
            self._pushed += 1

    def start_group(self) -> None:
        """A new cleaned segment: its ``.txnindex`` entries start empty; what is in flight carries on."""
        self.cleaned_index_entries = []

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

    def replay(self, events: TxnEvents) -> None:
        """Follow a segment's transactional batches and markers (``txn_events``) as a cleaning pass
        would, without writing anything. Batches outside transactions change nothing that a later
        decision depends on: the aborted transactions they would move out of the heap, the next
        transactional batch or marker moves in the same order."""
        for kind, producer_id, last_offset in events.tolist():
            if kind == TXN_DATA:
                self.on_batch_read(producer_id, True, last_offset)
            else:
                self.on_control_batch_read(producer_id, last_offset, None if kind == EMPTY_CONTROL else kind)
        self.cleaned_index_entries = []

    # --- the state a group written apart starts from (JSON-able) -------------------------------------
    def state(self) -> dict[str, Any]:
        return {"heap": [list(astuple(t)) for _, _, t in sorted(self._heap, key=lambda e: e[:2])],
                "ongoing_aborted": [[list(astuple(o.txn)), o.last_observed_batch_offset]
                                    for o in self._ongoing_aborted.values()],
                "ongoing_committed": sorted(self._ongoing_committed)}

    @classmethod
    def from_state(cls, doc: dict[str, Any]) -> TxnTracker:
        tracker = cls(AbortedTxn(*t) for t in doc["heap"])
        for txn, last_observed in doc["ongoing_aborted"]:
            aborted = AbortedTxn(*txn)
            tracker._ongoing_aborted[aborted.producer_id] = _Ongoing(aborted, last_observed)
        tracker._ongoing_committed = set(doc["ongoing_committed"])
        return tracker
