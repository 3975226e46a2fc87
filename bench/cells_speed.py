"""Throughput and Redis CPU per cell: one Redis, then the same load over two cells.

    python -m bench.cells_speed [--runs 40] [--calls 50] [--threads 4] [--workers 1]
                                [--concurrency 2] [--pool prefork] [--cells 1,2] [--json PATH]

For each cell count: that many private ``redis-server``s (Redis 7 when installed), and
``--workers`` ``toolq worker --shard N`` processes per cell on the SAFE queue; ``--threads``
client threads dispatch ``--runs`` runs of ``--calls`` no-op calls each (one ``dispatch`` per
run, so each run's calls go to its cell as batches) and wait for them. Reports calls per
second over the whole load, and each cell's share of runs and calls, Redis CPU seconds,
utilisation (CPU seconds per wall second) and µs of Redis CPU per call. ``speed.py``'s
``cells`` section runs this.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.peers.apps import registry  # noqa: E402
from bench.peers.toolq_side import toolq_argv  # noqa: E402
from bench.probes.redis_cost import Cost, machine_busy, measured, private_redis  # noqa: E402
from bench.procs import READY_TIMEOUT, Procs, worker_env  # noqa: E402
from toolq import Client, Settings  # noqa: E402
from toolq.cli.check import missing_queues  # noqa: E402
from toolq.models import CallStatus, RiskLevel  # noqa: E402


@contextlib.contextmanager
def servers(count: int) -> Iterator[list[str]]:
    """``count`` private Redis servers; their URLs."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(private_redis()).url for _ in range(count)]


def measure(
    cells: int,
    runs: int,
    calls: int,
    threads: int,
    workers: int,
    concurrency: int,
    pool: str,
) -> dict[str, Any]:
    """One row: ``cells`` cells under ``runs`` runs of ``calls`` no-op calls."""
    procs = Procs()
    with servers(cells) as urls:
        shards = json.dumps(urls)
        for index, url in enumerate(urls):
            env = worker_env(url)
            if cells > 1:
                env.update(TOOLQ_SHARDS=shards, TOOLQ_SHARD=str(index))
            for _ in range(workers):
                procs.start(toolq_argv(pool, concurrency), env)
        try:
            for url in urls:
                _wait_ready(url, procs)
            settings = Settings(shards=urls) if cells > 1 else Settings(redis_url=urls[0])
            probes = [redis.Redis.from_url(url) for url in urls]
            with Client(registry, settings) as client:
                _load(client, 2, calls, 1)  # warm-up: scripts loaded, connections open
                with contextlib.ExitStack() as stack:
                    costs = [stack.enter_context(measured(p)) for p in probes]
                    busy0 = machine_busy()
                    t0 = time.perf_counter()
                    placed = _load(client, runs, calls, threads)
                    elapsed = time.perf_counter() - t0
                    busy1 = machine_busy()
            for probe in probes:
                probe.close()
        finally:
            procs.stop_all()
    total = runs * calls
    per_cell = []
    for index, (out, url) in enumerate(zip(costs, urls, strict=True)):
        cost: Cost = out[0]
        cell_runs = placed.count(index) if cells > 1 else runs
        per_cell.append(
            {
                "cell": index,
                "runs": cell_runs,
                "calls": cell_runs * calls,
                "redis_cpu_s": round(cost.cpu_s, 3),
                "redis_cpu_utilisation": round(cost.utilisation, 3),
                "redis_cpu_us_per_call": round(cost.cpu_s * 1e6 / max(1, cell_runs * calls), 1),
                "url": url.rsplit("@", 1)[-1],
            }
        )
    machine = (busy1[0] - busy0[0]) / max(1e-9, busy1[1] - busy0[1])
    return {
        "cells": cells,
        "calls": total,
        "seconds": round(elapsed, 3),
        "calls_per_s": round(total / elapsed, 1),
        "machine_busy": round(machine, 3),
        "per_cell": per_cell,
    }


def _load(client: Client, runs: int, calls: int, threads: int) -> list[int]:
    """Dispatch ``runs`` runs of ``calls`` no-ops from ``threads`` threads; wait for all.

    Returns the cell of each run (0 without cells).
    """
    todo = list(range(runs))
    lock = threading.Lock()
    cells: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                if not todo or errors:
                    return
                todo.pop()
            payload = [
                {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}}
                for _ in range(calls)
            ]
            try:
                batch = client.dispatch(payload)
                results = batch.wait(timeout=300)
                bad = [r for r in results if r.status is not CallStatus.SUCCEEDED]
                if bad:
                    raise RuntimeError(f"{len(bad)} calls did not succeed, e.g. {bad[0]}")
                cell = client.cell_clients.index(client.cell_for_run(batch.run_id))
            except BaseException as exc:  # reported after the threads end
                with lock:
                    errors.append(exc)
                return
            with lock:
                cells.append(cell)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]
    return cells


def _wait_ready(url: str, procs: Procs) -> None:
    settings = Settings(redis_url=url)
    deadline = time.monotonic() + READY_TIMEOUT
    while missing_queues(settings, [RiskLevel.SAFE]):
        if any(p.poll() is not None for p in procs.procs):
            raise RuntimeError("a toolq worker exited")
        if time.monotonic() > deadline:
            raise RuntimeError("toolq workers not ready in time")
        time.sleep(0.1)


def render(rows: list[dict[str, Any]]) -> str:
    """The rows as a table."""
    lines = [
        "cells  calls  seconds  calls/s  machine busy  per cell: runs, calls, Redis CPU s "
        "(utilisation), µs Redis CPU per call"
    ]
    for row in rows:
        cells = "; ".join(
            f"cell {c['cell']}: {c['runs']} runs, {c['calls']} calls, {c['redis_cpu_s']} s "
            f"({c['redis_cpu_utilisation']:.0%}), {c['redis_cpu_us_per_call']} µs"
            for c in row["per_cell"]
        )
        lines.append(
            f"{row['cells']:>5}  {row['calls']:>5}  {row['seconds']:>7}  {row['calls_per_s']:>7}"
            f"  {row['machine_busy']:>11.0%}  {cells}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    p = argparse.ArgumentParser(prog="python -m bench.cells_speed", description=__doc__)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--calls", type=int, default=50, help="no-op calls per run (one dispatch)")
    p.add_argument("--threads", type=int, default=4, help="client threads")
    p.add_argument("--workers", type=int, default=1, help="worker processes per cell")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--pool", default="prefork")
    p.add_argument("--cells", default="1,2", help="cell counts to measure, in order")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    rows = [
        measure(int(n), a.runs, a.calls, a.threads, a.workers, a.concurrency, a.pool)
        for n in a.cells.split(",")
    ]
    print(render(rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
