"""Round-trip and batch figures of one system, and how they are taken."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

WARMUP = 20


class Side(Protocol):
    """A running system under test: one no-op round trip, or a batch of no-op calls."""

    name: str
    batch_how: str

    def round_trip(self) -> None:
        """Submit one no-op call and block until its result is back."""

    def batch(self, size: int, timeout: float) -> tuple[float, float]:
        """Submit ``size`` no-op calls, collect every result; (send seconds, total seconds)."""
        ...


@dataclass
class Figures:
    """Sequential round-trip latencies and one batch of one system."""

    name: str
    latencies_ms: list[float] = field(default_factory=list)
    batch_size: int = 0
    batch_send_s: float = 0.0
    batch_total_s: float = 0.0
    batch_how: str = ""

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 99)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.latencies_ms)

    @property
    def throughput(self) -> float:
        return self.batch_size / self.batch_total_s if self.batch_total_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "calls": len(self.latencies_ms),
            "p50_ms": self.p50,
            "p99_ms": self.p99,
            "mean_ms": self.mean,
            "min_ms": min(self.latencies_ms),
            "max_ms": max(self.latencies_ms),
            "batch": self.batch_size,
            "batch_send_s": self.batch_send_s,
            "batch_total_s": self.batch_total_s,
            "batch_calls_per_s": self.throughput,
            "batch_how": self.batch_how,
        }


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile with linear interpolation."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * pct / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def sequential(call: Callable[[], Any], n: int, warmup: int = WARMUP) -> list[float]:
    """Milliseconds of each of ``n`` calls made one after another, after ``warmup`` unmeasured."""
    for _ in range(warmup):
        call()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def measure(side: Side, calls: int, batch: int, timeout: float) -> Figures:
    """``calls`` sequential round trips (after the warm-up), then one batch of ``batch`` calls."""
    figures = Figures(side.name, batch_how=side.batch_how)
    figures.latencies_ms = sequential(side.round_trip, calls)
    send_s, total_s = side.batch(batch, timeout)
    figures.batch_size = batch
    figures.batch_send_s = send_s
    figures.batch_total_s = total_s
    return figures
