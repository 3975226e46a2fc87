"""The arq client of the comparison; runs in arq's own virtualenv and prints JSON figures.

    python -m bench.peers.arq_client --redis-url URL [--calls 300] [--batch 2000] [--warmup 20]
                                     [--poll-delay 0.002] [--timeout 120]

Round trip: ``enqueue_job("noop")`` + ``job.result(poll_delay=...)``: arq has no blocking
result wait, ``Job.result`` polls the result key (every 0.5 s by default; here every
``--poll-delay`` seconds). Batch: M ``enqueue_job`` one after another, then ``job.result``
on each job in order. Prints one JSON object: versions, latencies (ms), batch times (s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import arq
import redis
from arq.connections import ArqRedis, RedisSettings, create_pool


async def round_trip(pool: ArqRedis, poll_delay: float) -> None:
    """Enqueue one no-op job and poll for its result."""
    job = await pool.enqueue_job("noop")
    if job is None:
        raise RuntimeError("enqueue_job returned no job")
    await job.result(timeout=30, poll_delay=poll_delay)


async def latencies(pool: ArqRedis, calls: int, warmup: int, poll_delay: float) -> list[float]:
    """Milliseconds of ``calls`` sequential round trips after ``warmup`` unmeasured ones."""
    for _ in range(warmup):
        await round_trip(pool, poll_delay)
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await round_trip(pool, poll_delay)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def batch(
    pool: ArqRedis, size: int, poll_delay: float, timeout: float
) -> tuple[float, float]:
    """Enqueue ``size`` jobs, then wait for each result in order; (send s, total s)."""
    t0 = time.perf_counter()
    jobs = [await pool.enqueue_job("noop") for _ in range(size)]
    t1 = time.perf_counter()
    for job in jobs:
        if job is None:
            raise RuntimeError("enqueue_job returned no job")
        remaining = timeout - (time.perf_counter() - t0)
        await job.result(timeout=max(remaining, 0.001), poll_delay=poll_delay)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one arq run."""
    pool = await create_pool(RedisSettings.from_dsn(args.redis_url))
    try:
        lat = await latencies(pool, args.calls, args.warmup, args.poll_delay)
        send_s, total_s = await batch(pool, args.batch, args.poll_delay, args.timeout)
    finally:
        await pool.aclose()
    return {
        "arq": arq.VERSION,
        "redis-py": redis.__version__,
        "poll_delay_s": args.poll_delay,
        "latencies_ms": lat,
        "batch": args.batch,
        "batch_send_s": send_s,
        "batch_total_s": total_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--poll-delay", type=float, default=0.002, help="seconds")
    parser.add_argument("--timeout", type=float, default=120.0, help="batch timeout, seconds")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(run(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
