"""Round-trip latency and batch throughput: plain Celery vs toolq, same Redis, pool and concurrency.

    python -m bench.probes.roundtrip [--calls 300] [--batch 2000] [--pool prefork|threads|solo]
                                     [--concurrency 2] [--redis-url URL] [--rounds 1]
                                     [--batch-timeout 120] [--only raw|toolq] [--json PATH]

1. Raw Celery: a minimal Celery app (bench.peers.apps:raw_celery; Redis broker + Redis result
   backend, JSON, acks_late) and a real ``celery worker`` on queue ``bench.raw``.
   Sequential ``apply_async(...).get()`` round trips, then a batch of M ``apply_async``
   (one producer connection) collected with ``ResultSet.join_native(interval=0.005)`` (the
   fastest idiomatic collector for the Redis backend: it reads results in bulk instead of
   one ``get()`` per task; the default 0.5 s interval can leave it idle after the last result).
2. toolq: ``bench.peers.apps:registry`` (one no-op tool) served by ``python -m toolq worker``.
   Sequential ``client.call("noop", {})``, then one ``client.dispatch([...M calls...])`` and
   ``batch.wait()``.

Only one worker runs at a time (raw first, then toolq), each in its own process group;
they are stopped (SIGTERM, then SIGKILL) on exit or error, and the database is flushed
before and after: a private ``redis-server``, or with ``--redis-url`` an empty database.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.figures import WARMUP, Figures, measure, percentile, sequential  # noqa: E402
from bench.peers.raw_celery_side import RawCeleryWorker  # noqa: E402
from bench.peers.toolq_side import ToolqWorker  # noqa: E402
from bench.procs import READY_TIMEOUT, Procs, bench_redis, exit_on_signal, worker_env  # noqa: E402

__all__ = [
    "READY_TIMEOUT",
    "WARMUP",
    "Figures",
    "Procs",
    "RawCeleryWorker",
    "ToolqWorker",
    "bench_raw",
    "bench_toolq",
    "percentile",
    "sequential",
    "worker_env",
]


# -- the two sides ------------------------------------------------------------------------


def bench_raw(args: argparse.Namespace, procs: Procs) -> Figures:
    """Raw Celery's round trips and batch (``args``: calls, batch, pool, concurrency, ...)."""
    with RawCeleryWorker(
        procs, args.redis_url, pool=args.pool, concurrency=args.concurrency
    ) as side:
        return measure(side, args.calls, args.batch, args.batch_timeout)


def bench_toolq(args: argparse.Namespace, procs: Procs) -> Figures:
    """toolq's round trips and batch (``args``: calls, batch, pool, concurrency, ...)."""
    with ToolqWorker(procs, args.redis_url, pool=args.pool, concurrency=args.concurrency) as side:
        return measure(side, args.calls, args.batch, args.batch_timeout)


# -- report ----------------------------------------------------------------------------------


def environment(args: argparse.Namespace, r: redis.Redis) -> dict[str, Any]:
    import celery
    import kombu

    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    return {
        "python": platform.python_version(),
        "celery": celery.__version__,
        "kombu": kombu.__version__,
        "redis-py": redis.__version__,
        "redis-server": r.info("server").get("redis_version"),
        "pool": args.pool,
        "concurrency": args.concurrency,
        "cores": f"{affinity} usable / {os.cpu_count()} total",
        "loadavg_at_start": "/".join(f"{x:.2f}" for x in os.getloadavg()),
        "platform": platform.platform(),
        "redis_url": args.redis_url,
    }


def merge(rounds: list[Figures]) -> Figures:
    """All rounds of one side: latencies pooled, batch figures the median round's."""
    if len(rounds) == 1:
        return rounds[0]
    by_throughput = sorted(rounds, key=lambda f: f.throughput)
    mid = by_throughput[len(by_throughput) // 2]
    return Figures(
        name=rounds[0].name,
        latencies_ms=[x for f in rounds for x in f.latencies_ms],
        batch_size=mid.batch_size,
        batch_send_s=mid.batch_send_s,
        batch_total_s=mid.batch_total_s,
        batch_how=mid.batch_how,
    )


def row(f: Figures, name: str | None = None) -> str:
    return (
        f"{name or f.name:<16}{f.p50:>9.2f}{f.p99:>9.2f}{f.mean:>9.2f}"
        f"{f.batch_send_s:>14.3f}{f.batch_total_s:>15.3f}{f.throughput:>10.0f}"
    )


def report(
    env: dict[str, Any], raws: list[Figures], tqs: list[Figures], args: argparse.Namespace
) -> None:
    raw, tq = merge(raws), merge(tqs)
    print()
    print("Environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    print(
        f"Sequential round trips: {args.calls} calls after {WARMUP} warm-up; "
        f"batch: {args.batch} calls; rounds: {args.rounds} "
        "(order alternates; latencies pooled, batch = median round)"
    )
    print(f"  raw batch:   {raw.batch_how}")
    print(f"  toolq batch: {tq.batch_how}")
    print()
    header = (
        f"{'':<16}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'batch send s':>14}"
        f"{'batch total s':>15}{'calls/s':>10}"
    )
    print(header)
    print("-" * len(header))
    if len(raws) > 1:
        for i, (a, b) in enumerate(zip(raws, tqs, strict=True), 1):
            print(row(a, f"raw celery #{i}"))
            print(row(b, f"toolq #{i}"))
        print("-" * len(header))
    print(row(raw))
    print(row(tq))
    print()
    lat = tq.p50 / raw.p50
    thr = tq.throughput / raw.throughput
    lat_ok = "OK" if lat <= 1.25 else "MISS"
    thr_ok = "OK" if thr >= 1.0 else "MISS"
    print(f"toolq p50 / raw p50               = {lat:5.2f}   (target <= 1.25)  {lat_ok}")
    print(f"toolq mean / raw mean             = {tq.mean / raw.mean:5.2f}")
    print(f"toolq batch calls/s / raw calls/s = {thr:5.2f}   (target >= 1.00)  {thr_ok}")
    print(
        f"toolq dispatch-only for {args.batch} calls = {tq.batch_send_s * 1000:.0f} ms "
        f"({tq.batch_send_s / args.batch * 1e6:.0f} us/call); raw publish-only = "
        f"{raw.batch_send_s * 1000:.0f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--calls", type=int, default=300, help="sequential round trips (after warm-up)"
    )
    parser.add_argument("--batch", type=int, default=2000, help="calls in the throughput batch")
    parser.add_argument("--pool", choices=("prefork", "threads", "solo"), default="prefork")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument(
        "--redis-url", help="an empty database to use (default: a private redis-server)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat both sides, alternating which goes first (noisy hosts)",
    )
    parser.add_argument("--batch-timeout", type=float, default=120.0, help="seconds")
    parser.add_argument("--only", choices=("raw", "toolq"), help="run one side only")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, exit_on_signal)
    with bench_redis(args.redis_url) as url:
        args.redis_url = url
        return run_both(args)


def run_both(args: argparse.Namespace) -> int:
    """Both sides, ``--rounds`` times, on the Redis at ``args.redis_url``."""
    r = redis.Redis.from_url(args.redis_url)
    r.ping()
    procs = Procs()
    r.flushdb()
    try:
        env = environment(args, r)
        raws: list[Figures] = []
        tqs: list[Figures] = []
        for i in range(args.rounds):
            sides = [("raw", bench_raw, raws), ("toolq", bench_toolq, tqs)]
            if i % 2:
                sides.reverse()
            for name, run, out in sides:
                if args.only in (None, name):
                    out.append(run(args, procs))
                    r.flushdb()
        if raws and tqs:
            report(env, raws, tqs, args)
        else:
            for f in raws or tqs:
                print(json.dumps(f.as_dict(), indent=2))
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "env": env,
                        "raw": [f.as_dict() for f in raws],
                        "toolq": [f.as_dict() for f in tqs],
                    },
                    indent=2,
                )
            )
    finally:
        procs.stop_all()
        try:
            r.flushdb()
        finally:
            r.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
