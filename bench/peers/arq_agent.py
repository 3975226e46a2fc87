"""The agent workload's arq client; runs in arq's own virtualenv and prints JSON figures.

    python -m bench.peers.arq_agent --redis-url URL --conversations 1000 --turns 20
                                    [--poll-delay 0.5] [--timeout 120]

``--conversations`` asyncio tasks in one loop share one arq pool; each runs ``--turns``
turns, turn k enqueuing ``k % 3 + 1`` no-op jobs and waiting for every result
(``Job.result`` polls the result key every ``--poll-delay`` seconds: arq has no blocking
wait). Prints calls, wall seconds, each turn's milliseconds, errors and this process's CPU
seconds (``bench.agent`` reads them into its ``Outcome``). arq's venv has neither toolq nor
psutil, so this module imports only arq and the standard library.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from typing import Any

from arq.connections import ArqRedis, RedisSettings, create_pool


def cpu_seconds() -> float:
    """User + system CPU seconds of this process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def turn(pool: ArqRedis, calls: int, poll_delay: float, timeout: float) -> None:
    """Enqueue ``calls`` no-op jobs, then wait for each result."""
    jobs = [await pool.enqueue_job("noop") for _ in range(calls)]
    for job in jobs:
        if job is None:
            raise RuntimeError("enqueue_job returned no job")
        await job.result(timeout=timeout, poll_delay=poll_delay)


async def workload(args: argparse.Namespace) -> dict[str, Any]:
    """Every conversation to its end; the figures ``bench.agent`` reads."""
    pool = await create_pool(RedisSettings.from_dsn(args.redis_url))
    out: dict[str, Any] = {"calls": 0, "turn_ms": [], "errors": 0, "first_error": ""}

    async def conversation() -> None:
        calls = 0
        try:
            for k in range(args.turns):
                n = k % 3 + 1
                t0 = time.perf_counter()
                await turn(pool, n, args.poll_delay, args.timeout)
                out["turn_ms"].append((time.perf_counter() - t0) * 1000)
                calls += n
        except Exception as exc:
            out["errors"] += 1
            out["first_error"] = out["first_error"] or f"{type(exc).__name__}: {exc}"[:200]
        out["calls"] += calls

    try:
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        await asyncio.gather(*(conversation() for _ in range(args.conversations)))
        out["wall_s"] = time.perf_counter() - t0
        out["cpu_s"] = cpu_seconds() - cpu0
    finally:
        await pool.aclose()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--conversations", type=int, required=True)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--poll-delay", type=float, default=0.5, help="seconds (arq's default)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per result")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(workload(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
