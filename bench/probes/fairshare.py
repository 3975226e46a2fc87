"""The cost of fair share with one tenant: batch throughput with and without it, alternated.

``python -m bench.speed --sections fairshare`` (or this module's ``measure``). One
``toolq worker --pool prefork -c 2`` at a time on the same Redis: first as everyone runs it
(no ``TOOLQ_TENANTS``: no admission stage), then with ``TOOLQ_TENANTS`` naming one tenant
(fair share on, every call through its tenant's backlog and ``ADMIT``), the batches
dispatched for that tenant; ``rounds`` times each, alternating, so both see the same load.
The target: fair share costs at most 10% of batch throughput.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.figures import sequential
from bench.peers.toolq_side import ToolqWorker
from bench.procs import Procs

ONE_TENANT = {"acme": {}}
"""``TOOLQ_TENANTS`` of the fair-share runs: one tenant, default weight, no limits."""
TARGET = 0.90
"""Fair share's batch throughput must be at least this share of the plain path's."""


def measure(
    procs: Procs, redis_url: str, logs: Path, calls: int, rounds: int, timeout: float
) -> dict[str, Any]:
    """Median calls/s of ``rounds`` batches of ``calls`` each way, and their ratio."""
    rates: dict[str, list[float]] = {"plain": [], "fair_share": []}
    scheduled: dict[str, bool] = {}
    for i in range(rounds):
        for way in ("plain", "fair_share"):
            tenants = ONE_TENANT if way == "fair_share" else None
            with ToolqWorker(
                procs,
                redis_url,
                pool="prefork",
                concurrency=2,
                log=logs / f"fairshare-{way}-{i}.log",
                tenants=tenants,
                tenant="acme" if tenants else "default",
            ) as side:
                sequential(side.round_trip, 0)
                side.batch(min(calls, 200), timeout)  # warm both paths' scripts and pools
                _, total = side.batch(calls, timeout)
                # Which path the batch took: a call through admission has a 'lane'.
                first = side.client.store.run_call_ids(side.last_run_id)[0]
                scheduled[way] = bool(
                    side.client.redis.hexists(side.client.keys.call(first), "lane")
                )
            rates[way].append(calls / total)
    plain, fair = (statistics.median(rates[w]) for w in ("plain", "fair_share"))
    return {
        "calls": calls,
        "rounds": rounds,
        "plain_calls_per_s": plain,
        "fair_share_calls_per_s": fair,
        "runs": rates,
        "ratio": fair / plain,
        "through_admission": scheduled,
        "target_ratio": TARGET,
    }


def render(row: dict[str, Any]) -> str:
    """The figures and the verdict as text."""
    runs = {k: ", ".join(f"{v:,.0f}" for v in vs) for k, vs in row["runs"].items()}
    verdict = "PASS" if row["ratio"] >= row["target_ratio"] else "MISS"
    return (
        f"  {row['calls']:,}-call batch, prefork -c 2, median of {row['rounds']} alternated"
        f" rounds\n"
        f"  plain (no TOOLQ_TENANTS):        {row['plain_calls_per_s']:,.0f} calls/s"
        f"  ({runs['plain']})\n"
        f"  fair share, one tenant:          {row['fair_share_calls_per_s']:,.0f} calls/s"
        f"  ({runs['fair_share']})\n"
        f"  ratio {row['ratio']:.2f}x (target >= {row['target_ratio']:.2f}x): {verdict}"
    )
