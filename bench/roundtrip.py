"""Round-trip latency and batch throughput: plain Celery vs toolq, same Redis, pool and concurrency.

    python bench/roundtrip.py [--calls 300] [--batch 2000] [--pool prefork|threads|solo]
                              [--concurrency 2] [--redis-url redis://127.0.0.1:6379/14]
                              [--rounds 1] [--batch-timeout 120] [--only raw|toolq] [--json PATH]

1. Raw Celery: a minimal Celery app (bench.apps:raw_celery; Redis broker + Redis result
   backend, JSON, acks_late) and a real ``celery worker`` on queue ``bench.raw``.
   Sequential ``apply_async(...).get()`` round trips, then a batch of M ``apply_async``
   (one producer connection) collected with ``ResultSet.join_native()`` (the fastest
   idiomatic collector for the Redis backend: it reads results in bulk instead of one
   ``get()`` per task).
2. toolq: ``bench.apps:registry`` (one no-op tool) served by ``python -m toolq worker``.
   Sequential ``client.call("noop", {})``, then one ``client.dispatch([...M calls...])`` and
   ``batch.wait()``.

Only one worker runs at a time (raw first, then toolq), each in its own process group;
they are stopped (SIGTERM, then SIGKILL) on exit or error, and the database is flushed
before and after. Use a database nothing else uses (default 14).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

WARMUP = 20
READY_TIMEOUT = 60.0


# -- process handling ------------------------------------------------------------------------


class Procs:
    """Worker subprocesses, each in its own session/process group."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        # stdout is only the Celery banner; warnings and errors still reach stderr.
        proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL
        )
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
        """SIGTERM (Celery's warm shutdown), then SIGKILL the whole group after ``grace``.

        SIGTERM goes to the worker's main process only: it stops its own pool children,
        where a group-wide SIGTERM would make them die under it as "lost" workers.
        The group was created with the worker (``start_new_session``), so its id is the pid.
        """
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        # Anything left in the group (a stuck main process, orphaned prefork children).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc)


def _exit_on_signal(signum: int, frame: Any) -> None:
    """First SIGTERM/SIGINT ends the run; later ones are ignored so the cleanup finishes."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise SystemExit(128 + signum)


# -- measurement -----------------------------------------------------------------------------


@dataclass
class Figures:
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
    for _ in range(warmup):
        call()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def worker_env(redis_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["BENCH_REDIS_URL"] = redis_url
    env["TOOLQ_REDIS_URL"] = redis_url
    return env


# -- raw Celery ------------------------------------------------------------------------------


def bench_raw(args: argparse.Namespace, procs: Procs) -> Figures:
    from celery.result import ResultSet

    from bench.apps import RAW_QUEUE, make_raw_celery

    app = make_raw_celery(args.redis_url)
    task = app.tasks["bench.raw.noop"]
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "bench.apps:raw_celery",
        "worker",
        "--queues",
        RAW_QUEUE,
        "--pool",
        args.pool,
        "--concurrency",
        str(args.concurrency),
        "--loglevel",
        "warning",
        "--hostname",
        f"bench-raw-{os.getpid()}@%h",
        "--prefetch-multiplier",
        "4",
        "--without-gossip",
        "--without-mingle",
    ]
    if args.pool == "solo":
        argv.remove("--concurrency")
        argv.remove(str(args.concurrency))
    proc = procs.start(argv, worker_env(args.redis_url))
    figures = Figures("raw celery")
    try:
        # Readiness: the first round trip blocks until the worker consumes.
        task.apply_async(queue=RAW_QUEUE).get(timeout=READY_TIMEOUT)
        figures.latencies_ms = sequential(
            lambda: task.apply_async(queue=RAW_QUEUE).get(timeout=30), args.calls
        )
        t0 = time.perf_counter()
        with app.producer_or_acquire() as producer:
            results = [
                task.apply_async(queue=RAW_QUEUE, producer=producer) for _ in range(args.batch)
            ]
        t1 = time.perf_counter()
        ResultSet(results, app=app).join_native(timeout=args.batch_timeout)
        t2 = time.perf_counter()
        figures.batch_size = args.batch
        figures.batch_send_s = t1 - t0
        figures.batch_total_s = t2 - t0
        figures.batch_how = "apply_async x M on one producer + ResultSet.join_native()"
    finally:
        procs.stop(proc)
        app.close()
    return figures


# -- toolq -----------------------------------------------------------------------------------


def bench_toolq(args: argparse.Namespace, procs: Procs) -> Figures:
    from bench.apps import registry
    from toolq import Client, Settings
    from toolq.cli.check import missing_queues
    from toolq.models import CallStatus, RiskLevel

    settings = Settings(redis_url=args.redis_url)
    argv = [
        sys.executable,
        "-m",
        "toolq",
        "worker",
        "--app",
        "bench.apps:registry",
        "--risk",
        "safe",
        "--pool",
        args.pool,
        "--concurrency",
        str(args.concurrency),
        "--loglevel",
        "warning",
    ]
    proc = procs.start(argv, worker_env(args.redis_url))
    figures = Figures("toolq")
    client = Client(registry, settings)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while missing_queues(settings, [RiskLevel.SAFE]):
            if proc.poll() is not None:
                raise RuntimeError(f"toolq worker exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("toolq worker not ready in time")
            time.sleep(0.1)

        def one() -> None:
            result = client.call("noop", {}, timeout=30)
            if result.status is not CallStatus.SUCCEEDED:
                raise RuntimeError(f"noop did not succeed: {result}")

        figures.latencies_ms = sequential(one, args.calls)
        payload = [
            {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}}
            for _ in range(args.batch)
        ]
        t0 = time.perf_counter()
        batch = client.dispatch(payload)
        t1 = time.perf_counter()
        results = batch.wait(timeout=args.batch_timeout)
        t2 = time.perf_counter()
        bad = [r for r in results if r.status is not CallStatus.SUCCEEDED]
        if bad:
            raise RuntimeError(f"{len(bad)} batch calls did not succeed, e.g. {bad[0]}")
        figures.batch_size = args.batch
        figures.batch_send_s = t1 - t0
        figures.batch_total_s = t2 - t0
        figures.batch_how = "client.dispatch([M calls]) + batch.wait()"
    finally:
        client.close()
        procs.stop(proc)
    return figures


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
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
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
    if args.redis_url.rstrip("/").endswith("/13"):
        parser.error("database 13 belongs to the test suite; use another one")

    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
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
