"""Plain-text tables of the comparison: absolute figures first, then ratios."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from bench.figures import Figures
from bench.probes.scaling import BatchPoint, growth

RATIO_NOTE = (
    "ratios are toolq / other: above 1 for latency or time means toolq is slower; "
    "below 1 for calls/s means toolq is slower"
)


def heading(title: str) -> None:
    """A section title, underlined."""
    print()
    print(title)
    print("=" * len(title))


def ratio(a: float, b: float) -> float:
    """``a / b``, NaN when ``b`` is zero or either is NaN."""
    if not b or math.isnan(a) or math.isnan(b):
        return float("nan")
    return a / b


def roundtrip_tables(figures: Mapping[str, Figures]) -> dict[str, dict[str, float]]:
    """Latency and batch per system, then toolq / each other system; returns the ratios."""
    head = (
        f"{'system':<12}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}"
        f"{'batch send s':>14}{'batch total s':>15}{'calls/s':>9}"
    )
    print(head)
    print("-" * len(head))
    for name, f in figures.items():
        print(
            f"{name:<12}{f.p50:>9.2f}{f.p99:>9.2f}{f.mean:>9.2f}"
            f"{f.batch_send_s:>14.3f}{f.batch_total_s:>15.3f}{f.throughput:>9.0f}"
        )
    tq = figures.get("toolq")
    others = {n: f for n, f in figures.items() if n != "toolq"}
    ratios: dict[str, dict[str, float]] = {}
    if tq is None or not others:
        return ratios
    print()
    head = f"{'toolq /':<12}{'p50':>9}{'p99':>9}{'mean':>9}{'batch time':>14}{'calls/s':>9}"
    print(head)
    print("-" * len(head))
    for name, f in others.items():
        r = {
            "p50": ratio(tq.p50, f.p50),
            "p99": ratio(tq.p99, f.p99),
            "mean": ratio(tq.mean, f.mean),
            "batch_time": ratio(tq.batch_total_s, f.batch_total_s),
            "calls_per_s": ratio(tq.throughput, f.throughput),
        }
        ratios[name] = r
        print(
            f"{name:<12}{r['p50']:>9.2f}{r['p99']:>9.2f}{r['mean']:>9.2f}"
            f"{r['batch_time']:>14.2f}{r['calls_per_s']:>9.2f}"
        )
    print(f"({RATIO_NOTE})")
    return ratios


def latency_table(rows: Sequence[tuple[str, Mapping[str, float]]]) -> None:
    """One row per measured span: n, p50, p99, mean, min, max (ms)."""
    width = max(len(label) for label, _ in rows) + 2
    head = (
        f"{'':<{width}}{'n':>6}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'min ms':>9}{'max ms':>9}"
    )
    print(head)
    print("-" * len(head))
    for label, s in rows:
        print(
            f"{label:<{width}}{s['n']:>6}{s['p50_ms']:>9.2f}{s['p99_ms']:>9.2f}"
            f"{s['mean_ms']:>9.2f}{s['min_ms']:>9.2f}{s['max_ms']:>9.2f}"
        )


def approval_table(figures: Mapping[str, Any], calls: int) -> None:
    """The approval section's table."""
    heading(
        f"Approval decision -> execution start (toolq; {calls} gated no-op calls, "
        "one at a time; t0 = just before approve())"
    )
    latency_table(
        [
            ("approve() returned", figures["approve_returned"]),
            ("call.started written (event ts)", figures["decision_to_started"]),
            (
                "reader following the run has call.started",
                figures["decision_to_reader_has_started"],
            ),
        ]
    )


def events_table(figures: Mapping[str, Any], count: int, interval: float) -> None:
    """The event-delivery section's table."""
    heading(
        f"Event delivery to a subscribed reader (toolq; {count} progress events per mode; "
        "client.events(run_id, follow=True) in a thread)"
    )
    paced = f"paced, one per {interval * 1000:g} ms"
    latency_table(
        [
            (f"{paced}: produced -> reader", figures["paced"]["produced_to_reader"]),
            (f"{paced}: stream write -> reader", figures["paced"]["written_to_reader"]),
            ("back to back: produced -> reader", figures["burst"]["produced_to_reader"]),
            ("back to back: stream write -> reader", figures["burst"]["written_to_reader"]),
        ]
    )


def size_table(points: Mapping[str, Sequence[BatchPoint]]) -> dict[str, list[float]]:
    """Batch time by size per system, growth against the smallest, toolq / raw celery time."""
    return _scaling_table(points, "calls", "time", "x time(first)")


def process_table(points: Mapping[str, Sequence[BatchPoint]]) -> dict[str, list[float]]:
    """Batch time by pool processes per system, speed-up against one, toolq / raw celery."""
    return _scaling_table(points, "processes", "rate", "x calls/s(1st)")


def _scaling_table(
    points: Mapping[str, Sequence[BatchPoint]], key: str, by: Any, growth_label: str
) -> dict[str, list[float]]:
    systems = list(points)
    head = f"{key:>9}{'repeats':>8}"
    for name in systems:
        head += f"{name + ' s':>16}{'calls/s':>9}{growth_label:>15}"
    paired = "raw celery" in points and "toolq" in points
    if paired:
        head += f"{'toolq/celery time':>19}"
    print(head)
    print("-" * len(head))
    growths = {name: growth(points[name], by) for name in systems}
    rows = min(len(p) for p in points.values())
    ratios: list[float] = []
    for i in range(rows):
        first = points[systems[0]][i]
        line = f"{getattr(first, key):>9}{first.repeats:>8}"
        for name in systems:
            p = points[name][i]
            line += f"{p.seconds:>16.3f}{p.calls_per_s:>9.0f}{growths[name][i]:>15.2f}"
        if paired:
            r = ratio(points["toolq"][i].seconds, points["raw celery"][i].seconds)
            ratios.append(r)
            line += f"{r:>19.2f}"
        print(line)
    return {"toolq_over_celery_time": ratios, **{f"growth {n}": g for n, g in growths.items()}}
