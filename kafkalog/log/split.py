"""Splitting a segment whose offsets overflow its base (``LocalLog.splitOverflowedSegment``, spec §11.4).

A segment's indexes hold offsets relative to its base in 4 bytes, so its batches must lie within
``base + MAX_INT``. A segment written before that was enforced (KAFKA-6264; here, a cleaner that
measured a group's span from the wrong segment) holds valid records past that bound: truncating it
there, as for a corrupt batch, would lose them. Kafka's loader splits it instead: its batches are
copied, in order, into new segments, each based at the base offset of its first batch and taking
batches while they fit, and the new segments are swapped in for the old one with the crash-safe
``.cleaned → .swap`` protocol (``log/swap.py``). Their indexes are left to the loader's recovery,
which builds them (the transaction index included) from the new logs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kafkalog.errors import KafkaLogError
from kafkalog.format.scan import scan_batches
from kafkalog.log import names
from kafkalog.log.checkpoint import fsync_dir
from kafkalog.log.index import MAX_INT
from kafkalog.log.swap import replace_segments


def split_overflowed_segment(directory: Path, base_offset: int) -> list[int]:
    """Split the segment at ``base_offset`` into segments whose offsets fit their bases; returns the
    new base offsets. The caller holds the partition's lock."""
    source = names.log_file(directory, base_offset)
    data = source.read_bytes()
    batches = scan_batches(data, where=f"{source}: ")
    if batches.valid_end != len(data):
        raise KafkaLogError(f"{source}: {len(data) - batches.valid_end} bytes of an incomplete batch at its end; "
                            "nothing split")
    pieces: list[tuple[int, int, int]] = []  # (base offset, first byte, end byte)
    for i in range(len(batches)):
        start, end = int(batches.position[i]), int(batches.position[i] + batches.size[i])
        if pieces and int(batches.last_offset[i]) - pieces[-1][0] <= MAX_INT:
            pieces[-1] = (pieces[-1][0], pieces[-1][1], end)
        else:
            pieces.append((int(batches.base_offset[i]), start, end))
    mtime_ns = source.stat().st_mtime_ns
    for base, start, end in pieces:
        cleaned = names.log_file(directory, base, names.CLEANED_SUFFIX)
        with open(cleaned, "wb") as f:
            f.write(data[start:end])
            f.flush()
            os.fsync(f.fileno())
        os.utime(cleaned, ns=(mtime_ns, mtime_ns))  # retention judges the data by it, as before the split
    fsync_dir(directory)
    new_bases = [base for base, _, _ in pieces]
    replace_segments(directory, new_bases, [base_offset], mark_time_ms=int(time.time() * 1000))
    return new_bases
