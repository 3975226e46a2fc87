"""How batch wall time grows with the batch size and with the number of worker processes.

Sizes: one worker (the run's pool and concurrency) takes batches of each size in turn, after
the usual warm-up round trips. Batches under 1,000 calls are repeated (1,000 // size times,
at most 20) and the median counts, so that a 10-call batch is not one noisy sample.

Processes: for each k, a fresh worker with ``--concurrency k`` (one prefork worker with k pool
processes, for Celery and toolq alike) takes one batch of the given size.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal

from bench.figures import Side, sequential

MAX_REPEATS = 20


@dataclass
class BatchPoint:
    """The median wall time of batches of ``calls`` calls on ``processes`` pool processes."""

    calls: int
    processes: int
    seconds: float
    repeats: int

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "processes": self.processes,
            "seconds": self.seconds,
            "repeats": self.repeats,
            "calls_per_s": self.calls_per_s,
        }


def repeats_for(size: int) -> int:
    """How many batches of ``size`` calls to time (median counts)."""
    return max(1, min(MAX_REPEATS, 1000 // size))


def timed_batch(side: Side, size: int, processes: int, timeout: float) -> BatchPoint:
    """Median total time of ``repeats_for(size)`` batches of ``size`` calls."""
    repeats = repeats_for(size)
    times = [side.batch(size, timeout)[1] for _ in range(repeats)]
    return BatchPoint(size, processes, statistics.median(times), repeats)


def by_size(side: Side, sizes: Sequence[int], processes: int, timeout: float) -> list[BatchPoint]:
    """Batches of each size, smallest first, on one warmed-up worker."""
    sequential(side.round_trip, 0)
    return [timed_batch(side, size, processes, timeout) for size in sizes]


def by_processes(
    start: Callable[[int], AbstractContextManager[Side]],
    levels: Sequence[int],
    size: int,
    timeout: float,
    between: Callable[[], None] = lambda: None,
) -> list[BatchPoint]:
    """One batch of ``size`` calls on a fresh worker with each number of pool processes.

    ``start(k)`` starts the worker; ``between`` runs after each one stopped.
    """
    points = []
    for k in levels:
        with start(k) as side:
            sequential(side.round_trip, 0)
            points.append(timed_batch(side, size, k, timeout))
        between()
    return points


def growth(points: Sequence[BatchPoint], by: Literal["time", "rate"]) -> list[float]:
    """Each point against the first: time ratio for ``by="time"``, throughput for ``"rate"``."""
    if not points:
        return []
    first = points[0]
    if by == "time":
        return [p.seconds / first.seconds for p in points]
    return [p.calls_per_s / first.calls_per_s for p in points]
