"""Work over many partitions, spread across forked processes the way Kafka spreads loading a log dir's
partitions across ``num.recovery.threads.per.data.dir`` threads.

Each partition's work reads only that partition's files, so the partitions split, in order, into
consecutive shares: the calling process works the first share and a forked child each of the others
(a Python thread would wait on the interpreter lock; a forked child does not, and starts with every
module and the store the caller has loaded). The results come back in share order, so what the caller
builds from them is what one process would have built.

A caller that runs threads must not ask for more than one process: a forked child gets only the
calling thread. The pipeline's tasks work one shard each and leave the spreading to Airflow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# A fork and carrying the results back cost about what planning this many partitions does.
MIN_PARTITIONS_PER_PROCESS = 1000

_child_work: Callable[[Sequence[Any]], Any] | None = None


def map_shares(work: Callable[[Sequence[T]], R], partitions: Sequence[T], processes: int) -> list[R]:
    """``work`` of consecutive shares of ``partitions``, in order, on up to ``processes`` processes of at
    least ``MIN_PARTITIONS_PER_PROCESS`` partitions each. ``work`` stays in this process's memory (a
    fork inherits it); only the shares and the results are pickled."""
    shares = min(processes, len(partitions) // MIN_PARTITIONS_PER_PROCESS)
    if shares <= 1:
        return [work(partitions)]
    import multiprocessing  # here: every command that works in one process would pay for importing them
    from concurrent.futures import ProcessPoolExecutor

    size = -(-len(partitions) // shares)
    chunks = [partitions[i:i + size] for i in range(0, len(partitions), size)]
    with ProcessPoolExecutor(len(chunks) - 1, mp_context=multiprocessing.get_context("fork"),
                             initializer=_adopt, initargs=(work,)) as pool:
        children = [pool.submit(_work_in_child, chunk) for chunk in chunks[1:]]
        return [work(chunks[0])] + [child.result() for child in children]


def _adopt(work: Callable[[Sequence[Any]], Any]) -> None:
    global _child_work
    _child_work = work


def _work_in_child(partitions: Sequence[Any]) -> Any:
    assert _child_work is not None, "a share reached a process the pool did not fork"
    return _child_work(partitions)
