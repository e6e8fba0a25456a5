"""Loading a partition directory (``LogLoader.load``, spec §11.2) — the crash-recovery entry point.

Temporary files left by an interrupted swap are resolved first, exactly as Kafka does:

1. delete every ``.swap`` at or above the lowest ``.cleaned`` offset (an incomplete swap whose
   renames never finished); delete every ``.cleaned``;
2. the remaining ``.swap`` segments cover ``[min_swap, max_swap_next)``: delete every other file in
   that range (they were already replaced) and promote the swaps by dropping the suffix.

:func:`plan_temp_files` computes those actions without touching anything, so a read-only open
(``verify``, ``dump``, ``consume``) sees the directory as recovery *would* leave it and a writable
open carries the plan out.

One deliberate difference from Kafka: ``*.deleted`` files are *not* deleted at load. A broker loads a
partition once per start; kafkalog processes open partitions all the time, and deleting on open would
cut short the ``file.delete.delay.ms`` grace that readers were promised. ``retention sweep`` deletes
them once the delay has passed; until then they are invisible to the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kafkalog.format.scan import scan_batches
from kafkalog.log import names


@dataclass(frozen=True)
class TempFilePlan:
    """What recovery does to temporary files; ``promote`` maps a ``.swap`` path to its final path."""

    delete: tuple[Path, ...] = ()
    promote: tuple[tuple[Path, Path], ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not self.delete and not self.promote


def plan_temp_files(directory: Path) -> TempFilePlan:
    files = sorted(p for p in directory.iterdir() if p.is_file())
    delete: list[Path] = []
    notes: list[str] = []
    cleaned: list[Path] = []
    swaps: list[Path] = []
    for path in files:
        name = path.name
        if name.endswith(names.CLEANED_SUFFIX):
            cleaned.append(path)
        elif name.endswith(names.SWAP_SUFFIX):
            swaps.append(path)
    if cleaned:
        min_cleaned = min(names.offset_from_file_name(p.name) for p in cleaned)
        rolled_back = [p for p in swaps if names.offset_from_file_name(p.name) >= min_cleaned]
        if rolled_back:
            notes.append(f"interrupted swap rolled back: {', '.join(p.name for p in rolled_back)}")
        delete += rolled_back
        swaps = [p for p in swaps if p not in rolled_back]
        delete += cleaned
        notes.append(f"deleted unfinished cleaner output: {', '.join(p.name for p in cleaned)}")
    promote: list[tuple[Path, Path]] = []
    swap_logs = [p for p in swaps if p.name.endswith(names.LOG_SUFFIX + names.SWAP_SUFFIX)]
    if swap_logs:
        min_swap = min(names.offset_from_file_name(p.name) for p in swap_logs)
        max_swap = max(_next_offset(p) for p in swap_logs)
        for path in files:
            if path in delete or path.name.endswith(names.SWAP_SUFFIX):
                continue
            try:
                offset = names.offset_from_file_name(path.name)
            except ValueError:
                continue  # names without a numeric prefix are not segment files
            if min_swap <= offset < max_swap:
                delete.append(path)
        notes.append(f"interrupted swap rolled forward over offsets [{min_swap}, {max_swap})")
    for path in swaps:
        promote.append((path, path.with_name(path.name[: -len(names.SWAP_SUFFIX)])))
    return TempFilePlan(tuple(dict.fromkeys(delete)), tuple(promote), tuple(notes))


def _next_offset(swap_log: Path) -> int:
    base = names.offset_from_file_name(swap_log.name)
    data = swap_log.read_bytes()
    batches = scan_batches(data, where=f"{swap_log}: ")
    return int(batches.last_offset[-1]) + 1 if len(batches) else base


def apply_temp_file_plan(plan: TempFilePlan) -> None:
    for path in plan.delete:
        path.unlink(missing_ok=True)
    for source, target in plan.promote:
        source.replace(target)


def visible_files(directory: Path, plan: TempFilePlan) -> dict[str, Path]:
    """File name → path as the directory will look after ``plan``, without changing anything."""
    deleted = set(plan.delete)
    view = {p.name: p for p in directory.iterdir() if p.is_file() and p not in deleted}
    for source, target in plan.promote:
        view.pop(source.name, None)
        view[target.name] = source
    for name in list(view):
        if name.endswith((names.DELETED_SUFFIX, names.CLEANED_SUFFIX, names.SWAP_SUFFIX)):
            view.pop(name)
    return view
