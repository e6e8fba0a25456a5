"""Carrying out retention plans: mark segments ``.deleted`` (phase one) and sweep them (phase two).

Crash story: ``apply_retention`` re-plans under the partition lock with the plan's own clock and
never goes past the plan's cut, so applying a plan twice, or again after a crash, converges to the
same state. Marking advances the log start offset and writes its checkpoint before renaming; the
segments are renamed oldest first, ``.log`` first, so a crash leaves a prefix of them gone and the
rest intact — and a log start offset recovered as ``max(checkpoint, first segment base)``.

``sweep`` deletes ``.deleted`` files whose mark time (their mtime, stamped at marking) is at least
``file.delete.delay.ms`` old on the wall clock. It deletes regular files only: a symlink is never
followed out of the log dir, nor removed.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog.errors import LogLockedError
from kafkalog.log import checkpoint, names, swap
from kafkalog.log.lock import partition_lock
from kafkalog.log.snapshot import RetentionSource
from kafkalog.log.store import LogStore, PartitionLocation
from kafkalog.maintenance import journal
from kafkalog.policy.retention import DeletableSegment, RetentionPlan, plan_retention


@dataclass(frozen=True)
class RetentionReport:
    topic: str
    partition: int
    deleted_segments: tuple[int, ...]
    bytes: int
    rolled: bool
    log_start_offset_before: int
    log_start_offset_after: int
    marked_files: tuple[str, ...]
    mark_time_ms: int | None = None  # the wall clock stamped on the marked files (None: nothing marked)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class MarkingBatch:
    """Partitions marked one after another whose leader-epoch checkpoints are written together when the
    batch closes (``checkpoint.LeaderEpochBatch``: one flush for the batch, not one per partition),
    each partition's lock held until then, so no other writer sees its new segments with the old
    epochs' file in between. ``errors`` names the partitions whose new epoch file could not be written
    (their segments are marked; the old file stays, and every load truncates it again)."""

    def __init__(self) -> None:
        self.epochs = checkpoint.LeaderEpochBatch()
        self.errors: list[tuple[Path, OSError]] = []  # (partition directory, why)
        self._locks = ExitStack()

    def hold(self, lock: ExitStack) -> None:
        """Keep the partition lock ``lock`` holds until the batch closes."""
        self._locks.enter_context(lock.pop_all())

    def close(self) -> None:
        try:
            self.errors += [(path.parent, error) for path, error in self.epochs.commit()]
        finally:
            self._locks.close()

    def __enter__(self) -> MarkingBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MarkingBatches:
    """One ``MarkingBatch`` after another, each closed in the background while the next is marked, as
    Kafka flushes a truncated leader-epoch cache on its scheduler rather than on the thread that
    deleted the segments (``truncateFromStartAsyncFlush``); a closed batch's partitions stay locked
    until its files are written. Leaving the block waits for every batch; ``errors`` are theirs."""

    def __init__(self) -> None:
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="kafkalog-epoch-batches")
        self._closing: list[tuple[MarkingBatch, Future[None]]] = []

    @contextmanager
    def batch(self) -> Iterator[MarkingBatch]:
        """A new batch, handed to the background to close when the block ends."""
        batch = MarkingBatch()
        try:
            yield batch
        finally:
            self._closing.append((batch, self._flusher.submit(batch.close)))

    @property
    def errors(self) -> list[tuple[Path, OSError]]:
        return [error for batch, _ in self._closing for error in batch.errors]

    def __enter__(self) -> MarkingBatches:
        return self

    def __exit__(self, *exc: object) -> None:
        self._flusher.shutdown(wait=True)
        for _, closed in self._closing:
            closed.result()  # an error other than a file's is the run's


def apply_retention(store: LogStore, location: PartitionLocation, plan: RetentionPlan, *, run_id: str,
                    lock_timeout_s: float = 30.0, batch: MarkingBatch | None = None) -> RetentionReport:
    """Mark the plan's segments deleted (never more than the plan: its cut is the upper bound).

    Under the partition lock the plan is made again with its own clock from the files as they are
    now. A partition as its last writer left it, closed and flushed (``LogStore.flushed_log_end``), is
    marked from that listing, as Kafka's broker marks its loaded log: loading it would change nothing
    the plan decides (the files of the segments whose timestamps it read, and the log end, are
    checked as the loader checks them; ``snapshot.clean_log_end``). Any other (a crash to recover, a
    cleaner's files, every segment going, which needs a roll) is loaded in full first, as Kafka's
    loader would. With ``batch``, a partition marked from its listing leaves its leader-epoch checkpoint
    and its lock to the batch, which writes and releases them when it closes."""
    cut = max((s.base_offset for s in plan.segments), default=None)
    with ExitStack() as lock:
        lock.enter_context(partition_lock(location.directory, timeout_s=lock_timeout_s))
        with _source(store, location) as snapshot:
            if cut is None:
                return _unchanged(location, snapshot.log_start_offset)
            todo = _todo(store, snapshot, plan.now_ms, cut)
            if not todo:  # marked already (a retry): finish what a try killed after its renames left undone
                end = store.flushed_log_end(location, snapshot)
                if end is not None and _epochs_aligned(snapshot.files.leader_epochs(), snapshot.log_start_offset, end):
                    store.write_offsets(location, recovery_point=end, log_start_offset=snapshot.log_start_offset)
                    return _unchanged(location, snapshot.log_start_offset)
            elif (report := _mark_listed(store, location, snapshot, todo, run_id, batch, lock)) is not None:
                return report
    return _mark_loaded(store, location, plan.now_ms, cut, run_id, lock_timeout_s)


def enforce_retention(store: LogStore, location: PartitionLocation, now_ms: int, *, run_id: str,
                      lock_timeout_s: float = 30.0,
                      batch: MarkingBatch | None = None) -> tuple[RetentionPlan, RetentionReport]:
    """Plan and mark in one pass, as Kafka's ``deleteOldSegments`` decides and deletes under the log's
    lock: the plan (returned with what was marked) is made under the partition lock and marked at
    once, as ``apply_retention`` marks a plan. A partition another process holds locked is planned
    without its lock, and waited for (``apply_retention``, up to ``lock_timeout_s``) only if it has
    segments due: one being cleaned or written to with nothing to delete is not held up."""
    with ExitStack() as lock:
        try:
            lock.enter_context(partition_lock(location.directory, timeout_s=0))
        except LogLockedError:
            locked = False
        else:
            locked = True
        with _source(store, location) as snapshot:
            plan = plan_retention(snapshot, now_ms, broker=store.broker)
            if not plan.segments:
                return plan, _unchanged(location, snapshot.log_start_offset)
            todo = list(plan.segments)
            if locked and (report := _mark_listed(store, location, snapshot, todo, run_id, batch, lock)) is not None:
                return plan, report
    if not locked:
        return plan, apply_retention(store, location, plan, run_id=run_id, lock_timeout_s=lock_timeout_s, batch=batch)
    return plan, _mark_loaded(store, location, now_ms, plan.segments[-1].base_offset, run_id, lock_timeout_s)


def _unchanged(location: PartitionLocation, log_start_offset: int) -> RetentionReport:
    tp = location.topic_partition
    return RetentionReport(tp.topic, tp.partition, (), 0, False, log_start_offset, log_start_offset, ())


def _mark_listed(store: LogStore, location: PartitionLocation, snapshot: RetentionSource,
                 todo: list[DeletableSegment], run_id: str, batch: MarkingBatch | None,
                 lock: ExitStack) -> RetentionReport | None:
    """Mark ``todo`` from the partition's listing if it keeps a segment and is closed and flushed (see
    ``apply_retention``); None if it needs the full load. ``lock`` holds the partition's lock: with
    ``batch`` it is handed to the batch, which releases it once it has written the partition's epochs."""
    if len(todo) >= len(snapshot.bases) or (end := store.flushed_log_end(location, snapshot)) is None:
        return None
    report = _mark_flushed(store, location, snapshot, todo, end, run_id, batch)
    if batch is not None:
        batch.hold(lock)
    return report


def _source(store: LogStore, location: PartitionLocation) -> RetentionSource:
    """The partition's segments as the planner reads them, read as it asks (a context manager)."""
    tp = location.topic_partition
    return RetentionSource(location.log_dir, tp.topic, tp.partition, store.log_config(tp.topic),
                           store.log_dir_checkpoints(location.log_dir))


def _todo(store: LogStore, snapshot: RetentionSource, now_ms: int, cut: int) -> list[DeletableSegment]:
    """What retention at ``now_ms``, planned again from ``snapshot``, still deletes up to ``cut``."""
    fresh = plan_retention(snapshot, now_ms, broker=store.broker)
    return [s for s in fresh.segments if s.base_offset <= cut]


def _epochs_aligned(entries: list[tuple[int, int]], log_start_offset: int, log_end_offset: int) -> bool:
    """Whether the leader epochs ``entries`` already start no lower than the log and none starts at or
    past its end (else a retried mark whose first try was killed after its renames has their truncation
    to finish)."""
    return not entries or (entries[0][1] >= log_start_offset and entries[-1][1] < log_end_offset)


def _mark_flushed(store: LogStore, location: PartitionLocation, snapshot: RetentionSource,
                  todo: list[DeletableSegment], log_end_offset: int, run_id: str,
                  batch: MarkingBatch | None) -> RetentionReport:
    """Mark ``todo``, the oldest segments but not all, of a closed and flushed partition; the caller holds
    its lock. The recovery point stays at the log end, where the flushed log has it."""
    before = snapshot.log_start_offset
    after = max(before, snapshot.bases[len(todo)])
    mark_ms = wall_clock_ms()
    store.write_offsets(location, recovery_point=log_end_offset, log_start_offset=after)
    marked = swap.mark_segments_deleted(location.directory, [s.base_offset for s in todo], log_start_offset=after,
                                        log_end_offset=log_end_offset, mark_time_ms=mark_ms,
                                        epochs=None if batch is None else batch.epochs, listed=snapshot.listed,
                                        leader_epochs=snapshot.files.leader_epochs())
    return _journal_marks(location, run_id, mark_ms, todo, marked, before, after, rolled=False)


def _mark_loaded(store: LogStore, location: PartitionLocation, now_ms: int, cut: int, run_id: str,
                 lock_timeout_s: float) -> RetentionReport:
    """Mark what retention deletes at ``now_ms`` up to ``cut`` on the partition loaded in full (recovered
    first where it needs it)."""
    tp = location.topic_partition
    with store.writable_log(location, timeout_s=lock_timeout_s) as log:
        before = log.log_start_offset
        with _source(store, location) as source:
            todo = _todo(store, source, now_ms, cut)
        mark_ms = wall_clock_ms()
        rolled = False
        if todo and len(todo) == len(log.segments):
            log.roll()  # every segment goes: keep a new, empty active segment at the log end
            rolled = True
            journal.append(location.log_dir, journal.JournalEntry(
                run_id, mark_ms, tp.topic, tp.partition, "roll", (log.active_segment.base_offset,),
                "all segments deletable", log_start_offset_before=before, log_start_offset_after=before))
        marked: dict[int, list[str]] = {}
        for path in log.mark_segments_deleted(len(todo), mark_time_ms=mark_ms) if todo else []:
            marked.setdefault(names.offset_from_file_name(path.name), []).append(path.name)
        if not todo:  # the plan's segments are marked already: a retry whose first try died after the renames
            log.align_leader_epochs()
        store.write_checkpoints(location, log)
        return _journal_marks(location, run_id, mark_ms, todo, marked, before, log.log_start_offset, rolled=rolled)


def _journal_marks(location: PartitionLocation, run_id: str, mark_ms: int, todo: list[DeletableSegment],
                   marked: dict[int, list[str]], before: int, after: int, *, rolled: bool) -> RetentionReport:
    """Journal each marked segment with its files; the report of the mark. ``marked``: file names by base."""
    tp = location.topic_partition
    journal.append(location.log_dir, *(journal.JournalEntry(
        run_id, mark_ms, tp.topic, tp.partition, "mark-deleted", (segment.base_offset,),
        f"{segment.reason}: {segment.detail}", segment.size_bytes, before, after,
        tuple(marked.get(segment.base_offset, ()))) for segment in todo))
    return RetentionReport(tp.topic, tp.partition, tuple(s.base_offset for s in todo),
                           sum(s.size_bytes for s in todo), rolled, before, after,
                           tuple(name for files in marked.values() for name in files), mark_ms if todo else None)


@dataclass
class SweepReport:
    topic: str
    partition: int
    deleted_files: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    waiting_files: list[str] = field(default_factory=list)
    waiting_bytes: int = 0
    next_due_ms: int | None = None
    refused: list[str] = field(default_factory=list)


def sweep_partition(store: LogStore, location: PartitionLocation, *, wall_now_ms: int, run_id: str,
                    dry_run: bool = False) -> SweepReport:
    """Phase two: delete this partition's ``.deleted`` files whose delay has passed (a dry run only
    says which)."""
    tp = location.topic_partition
    delay_ms = store.log_config(tp.topic).file_delete_delay_ms
    report = SweepReport(tp.topic, tp.partition)
    directory = location.directory
    if directory.is_symlink() or directory.resolve().parent != location.log_dir.resolve():
        report.refused.append(f"{directory}: partition directory leads outside its log dir; not swept")
        return report
    # Through the directory's descriptor: each stat and unlink resolves one name, not the whole path.
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with os.scandir(dir_fd) as entries:
            doomed = sorted((e for e in entries if e.name.endswith(names.DELETED_SUFFIX)), key=lambda e: e.name)
        for entry in doomed:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                report.refused.append(f"{directory / entry.name}: not a regular file "
                                      f"({names.file_kind(info.st_mode)}); left alone")
                continue
            due_ms = info.st_mtime_ns // 1_000_000 + delay_ms
            if wall_now_ms >= due_ms:
                if not dry_run:
                    os.unlink(entry.name, dir_fd=dir_fd)
                report.deleted_files.append(entry.name)
                report.deleted_bytes += info.st_size
            else:
                report.waiting_files.append(entry.name)
                report.waiting_bytes += info.st_size
                report.next_due_ms = due_ms if report.next_due_ms is None else min(report.next_due_ms, due_ms)
    finally:
        os.close(dir_fd)
    if report.deleted_files and not dry_run:
        journal.append(location.log_dir, journal.JournalEntry(
            run_id, wall_now_ms, tp.topic, tp.partition, "sweep",
            tuple(sorted({names.offset_from_file_name(n) for n in report.deleted_files})),
            f"file.delete.delay.ms={delay_ms} elapsed", report.deleted_bytes, files=tuple(report.deleted_files)))
    return report


def pending_delete_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(names.DELETED_SUFFIX))
