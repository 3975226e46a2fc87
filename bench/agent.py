"""The agent workload: many conversations at once, each turn dispatching 1-3 calls and waiting.

```bash
python -m bench.agent                 # all: 32 and 256 conversations, 1,000 async (~10 min)
python -m bench.agent --quick         # default configurations, 32 conversations, < 1 min
python -m bench.agent --json /tmp/agent.json
```

A conversation is a thread (or, for the asyncio clients, a task) that runs ``--turns`` model
turns; turn k dispatches ``k % 3 + 1`` no-op calls and waits for all of them before the next.
All conversations of one system share one client. Every system runs on one private
``redis-server`` (flushed between systems), at its defaults first, then tuned; systems are
started in alternated order over ``--rounds`` rounds and each figure is the median round.

Per configuration and conversation count: calls/s (every call of every conversation over the
wall time from the start to the last turn), turn p50/p99 (dispatch to last result), the ratio
to the best peer's calls/s at the same count, CPU per call of the client (this process), the
worker (its process tree, psutil) and Redis (``INFO cpu``), and Redis commands per call
(``INFO commandstats`` delta without the snapshots' own ``INFO``; commands a script issues
count, and a pipeline counts each command) and Redis reads per call (``total_reads_processed``:
each read of a client's socket by the server, about one per round trip: a pipeline or a
script is one, a request that arrives in two TCP segments may be two).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis

from bench.figures import percentile
from bench.procs import (
    READY_TIMEOUT,
    ROOT,
    Procs,
    bench_redis,
    exit_on_signal,
    tail,
    worker_env,
)

TIMEOUT = 120.0
"""Seconds one turn may take before the run counts it as failed."""


# -- the workload ----------------------------------------------------------------------------


@dataclass
class Outcome:
    """One run of the workload on one system."""

    conversations: int
    turns: int
    calls: int = 0
    wall_s: float = 0.0
    turn_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    cpu_client_s: float = 0.0
    cpu_worker_s: float = 0.0
    cpu_redis_s: float = 0.0
    redis_commands: int = 0
    redis_reads: int = 0

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.wall_s if self.wall_s and not self.errors else 0.0

    def per_call_us(self, seconds: float) -> float:
        return seconds / self.calls * 1e6 if self.calls else float("nan")

    def summary(self) -> dict[str, Any]:
        return {
            "conversations": self.conversations,
            "turns": self.turns,
            "calls": self.calls,
            "wall_s": self.wall_s,
            "calls_per_s": self.calls_per_s,
            "turn_p50_ms": percentile(self.turn_ms, 50),
            "turn_p99_ms": percentile(self.turn_ms, 99),
            "errors": self.errors,
            "first_error": self.first_error,
            "cpu_us_per_call": {
                "client": self.per_call_us(self.cpu_client_s),
                "worker": self.per_call_us(self.cpu_worker_s),
                "redis": self.per_call_us(self.cpu_redis_s),
            },
            "redis_commands_per_call": self.redis_commands / self.calls if self.calls else 0.0,
            "redis_reads_per_call": self.redis_reads / self.calls if self.calls else 0.0,
        }


def calls_in_turn(turn: int) -> int:
    """Turn k of a conversation asks for 1, 2 or 3 calls."""
    return turn % 3 + 1


def run_threads(turn: Callable[[int], None], conversations: int, turns: int) -> Outcome:
    """``conversations`` threads, each running ``turns`` turns of ``turn(n_calls)``."""
    out = Outcome(conversations, turns)
    lock = threading.Lock()
    start = threading.Barrier(conversations + 1)

    def conversation() -> None:
        mine: list[float] = []
        calls = 0
        try:
            start.wait(60)
            for k in range(turns):
                t0 = time.perf_counter()
                turn(calls_in_turn(k))
                mine.append((time.perf_counter() - t0) * 1000)
                calls += calls_in_turn(k)
        except Exception as exc:
            with lock:
                out.errors += 1
                out.first_error = out.first_error or f"{type(exc).__name__}: {exc}"[:200]
        with lock:
            out.turn_ms.extend(mine)
            out.calls += calls

    threads = [threading.Thread(target=conversation, daemon=True) for _ in range(conversations)]
    for t in threads:
        t.start()
    start.wait(60)
    t0 = time.perf_counter()
    for t in threads:
        t.join(TIMEOUT * turns)
    out.wall_s = time.perf_counter() - t0
    return out


def run_tasks(turn: Callable[[int], Awaitable[None]], conversations: int, turns: int) -> Outcome:
    """``conversations`` asyncio tasks in one loop, each running ``turns`` turns."""
    out = Outcome(conversations, turns)

    async def conversation() -> None:
        calls = 0
        try:
            for k in range(turns):
                t0 = time.perf_counter()
                await asyncio.wait_for(turn(calls_in_turn(k)), TIMEOUT)
                out.turn_ms.append((time.perf_counter() - t0) * 1000)
                calls += calls_in_turn(k)
        except Exception as exc:
            out.errors += 1
            out.first_error = out.first_error or f"{type(exc).__name__}: {exc}"[:200]
        out.calls += calls

    async def main() -> None:
        t0 = time.perf_counter()
        await asyncio.gather(*(conversation() for _ in range(conversations)))
        out.wall_s = time.perf_counter() - t0

    asyncio.run(main())
    return out


# -- meters ----------------------------------------------------------------------------------


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and its descendants now alive."""
    total = 0.0
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = proc.cpu_times()
                total += times.user + times.system
    return total


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def redis_counters(client: redis.Redis) -> tuple[float, int, int]:
    """Redis's CPU seconds, commands served (without ``INFO`` itself) and socket reads."""
    cpu: Any = client.info("cpu")
    stats: Any = client.info("commandstats")
    reads: Any = client.info("stats")
    commands = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")
    cpu_s = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    return cpu_s, commands, int(reads["total_reads_processed"])


def measured(run: Callable[[], Outcome], worker_pids: list[int], watch: redis.Redis) -> Outcome:
    """``run()`` with the CPU of client, worker and Redis and Redis's commands around it.

    A remote run's client CPU is the one its subprocess reported (already in ``run()``'s
    outcome); this process's own CPU counts only for a run in this process.
    """
    redis0, commands0, reads0 = redis_counters(watch)
    worker0 = sum(tree_cpu(pid) for pid in worker_pids)
    client0 = self_cpu()
    out = run()
    if not out.cpu_client_s:
        out.cpu_client_s = self_cpu() - client0
    out.cpu_worker_s = sum(tree_cpu(pid) for pid in worker_pids) - worker0
    redis1, commands1, reads1 = redis_counters(watch)
    out.cpu_redis_s = redis1 - redis0
    out.redis_commands = commands1 - commands0 - 1  # the second snapshot's CPU INFO
    out.redis_reads = reads1 - reads0 - 3  # the second snapshot's three INFO
    return out


# -- the systems -----------------------------------------------------------------------------


@dataclass
class Config:
    """One system in one configuration."""

    key: str
    label: str
    tuning: str
    peer: bool
    kind: str  # "threads" or "asyncio": how its conversations run
    start: Callable[[Procs, str, Path], contextlib.AbstractContextManager[Any]]


class Running:
    """A started system: its worker's pid and one turn of a conversation.

    A system whose client cannot run in this process (arq, in a virtualenv of its own) gives
    ``remote`` instead: it runs a whole workload (conversations, turns) in a subprocess and
    returns its ``Outcome``, the subprocess's CPU as the client's; ``worker_pids`` then names
    every worker process when there are several.
    """

    def __init__(
        self,
        worker_pid: int,
        turn: Callable[[int], Any] | None,
        remote: Callable[[int, int], Outcome] | None = None,
        worker_pids: list[int] | None = None,
    ) -> None:
        self.worker_pid = worker_pid
        self.worker_pids = worker_pids or [worker_pid]
        self.turn = turn
        self.remote = remote


@contextlib.contextmanager
def toolq_sync(
    procs: Procs,
    url: str,
    log: Path,
    pool: str,
    concurrency: int,
    processes: int = 1,
    prefetch: int = 0,
) -> Iterator[Running]:
    from bench.peers.toolq_side import ToolqWorker

    with ToolqWorker(
        procs,
        url,
        pool=pool,
        concurrency=concurrency,
        log=log,
        processes=processes,
        prefetch=prefetch,
    ) as side:
        client = side.client

        def turn(n: int) -> None:
            payload = [
                {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}}
                for _ in range(n)
            ]
            for result in client.dispatch(payload).wait(timeout=TIMEOUT):
                if result.status.value != "succeeded":
                    raise RuntimeError(f"noop did not succeed: {result.status}")

        pids = [proc.pid for proc in side.procs_started]
        yield Running(pids[0], turn, worker_pids=pids)


@contextlib.contextmanager
def toolq_async(
    procs: Procs, url: str, log: Path, pool: str, concurrency: int, processes: int = 1
) -> Iterator[Running]:
    from bench.peers.apps import registry
    from toolq import AsyncClient

    with toolq_sync(procs, url, log, pool, concurrency, processes) as running:
        holder: dict[str, Any] = {}

        async def turn(n: int) -> None:
            # One AsyncClient per event loop (each run makes a loop of its own).
            loop = asyncio.get_running_loop()
            if holder.get("loop") is not loop:
                if "client" in holder:
                    holder["client"].sync.close()
                holder["loop"] = loop
                holder["client"] = AsyncClient(registry, running_settings(url))
            client = holder["client"]
            payload = [
                {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}}
                for _ in range(n)
            ]
            batch = await client.dispatch(payload)
            for result in await batch.wait(timeout=TIMEOUT):
                if result.status.value != "succeeded":
                    raise RuntimeError(f"noop did not succeed: {result.status}")

        try:
            yield Running(running.worker_pid, turn, worker_pids=running.worker_pids)
        finally:
            if "client" in holder:
                holder["client"].sync.close()


def running_settings(url: str) -> Any:
    from toolq import Settings

    return Settings(redis_url=url)


@contextlib.contextmanager
def dramatiq_sync(
    procs: Procs, url: str, log: Path, processes: int | None, threads: int | None
) -> Iterator[Running]:
    from bench.peers.dramatiq_side import RESULT_TIMEOUT_MS, DramatiqWorker

    with DramatiqWorker(procs, url, processes=processes, threads=threads, log=log) as side:
        app = side.app

        def turn(n: int) -> None:
            messages = [app.noop.send() for _ in range(n)]
            for message in messages:
                message.get_result(backend=app.backend, block=True, timeout=RESULT_TIMEOUT_MS)

        yield Running(side.proc.pid, turn)


@contextlib.contextmanager
def celery_sync(
    procs: Procs, url: str, log: Path, pool: str, concurrency: int
) -> Iterator[Running]:
    from celery.result import ResultSet

    from bench.peers.raw_celery_side import JOIN_INTERVAL, RawCeleryWorker

    with RawCeleryWorker(procs, url, pool=pool, concurrency=concurrency, log=log) as side:

        def turn(n: int) -> None:
            results = [side._send() for _ in range(n)]
            ResultSet(results, app=side.app).join_native(timeout=TIMEOUT, interval=JOIN_INTERVAL)

        yield Running(side.proc.pid, turn)


@contextlib.contextmanager
def taskiq_async(procs: Procs, url: str, log: Path, check_interval: float) -> Iterator[Running]:
    from bench.peers.taskiq_app import make_taskiq

    argv = [sys.executable, "-m", "taskiq", "worker", "bench.peers.taskiq_app:broker"]
    proc = procs.start(argv, worker_env(url), log)
    try:
        holder: dict[str, Any] = {}

        async def client() -> Any:
            # One broker per event loop (each run makes a loop of its own); the first task of
            # a loop starts it, the others wait for that. The last loop's broker is dropped
            # with its loop.
            loop = asyncio.get_running_loop()
            if holder.get("loop") is not loop:
                broker, noop = make_taskiq(url)
                started = loop.create_future()
                holder.update(loop=loop, broker=broker, noop=noop, started=started)
                await broker.startup()
                started.set_result(None)
            await holder["started"]
            return holder["noop"]

        async def turn(n: int) -> None:
            noop = await client()
            tasks = [await noop.kiq() for _ in range(n)]
            for task in tasks:
                result = await task.wait_result(check_interval=check_interval, timeout=TIMEOUT)
                if result.is_err:
                    raise RuntimeError(f"taskiq noop failed: {result.error}")

        async def ready() -> None:
            await asyncio.wait_for(turn(1), READY_TIMEOUT)

        asyncio.run(ready())
        yield Running(proc.pid, turn)
    finally:
        procs.stop(proc)


@contextlib.contextmanager
def arq_async(
    procs: Procs, url: str, log: Path, poll_delay: float, processes: int
) -> Iterator[Running]:
    """arq's workers, and its client as a subprocess in arq's own virtualenv (``arq_agent``)."""
    from bench.peers.arq_side import arq_workers

    first = len(procs.procs)
    with arq_workers(procs, url, processes=processes, poll_delay=poll_delay, log=log) as (
        bin_dir,
        env,
    ):
        pids = [proc.pid for proc in procs.procs[first:]]

        def remote(conversations: int, turns: int) -> Outcome:
            argv = [
                str(bin_dir / "python"),
                "-m",
                "bench.peers.arq_agent",
                "--redis-url",
                url,
                "--conversations",
                str(conversations),
                "--turns",
                str(turns),
                "--poll-delay",
                repr(poll_delay),
                "--timeout",
                repr(TIMEOUT),
            ]
            done = subprocess.run(
                argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT * turns
            )
            if done.returncode:
                last = "\n".join(done.stderr.strip().splitlines()[-8:])
                raise RuntimeError(f"arq client exited with {done.returncode}:\n{last}")
            data = json.loads(done.stdout)
            return Outcome(
                conversations,
                turns,
                calls=data["calls"],
                wall_s=data["wall_s"],
                turn_ms=data["turn_ms"],
                errors=data["errors"],
                first_error=data["first_error"],
                cpu_client_s=data["cpu_s"],
            )

        remote(1, 1)  # ready: one job through
        yield Running(pids[0], None, remote=remote, worker_pids=pids)


def configs(cores: int) -> list[Config]:
    """Peers at their defaults, then tuned; then toolq's pools."""
    from bench.peers.setups import dramatiq_defaults

    d = dramatiq_defaults()
    dp, dt = d.get("processes", cores), d.get("threads", 8)
    out = [
        Config(
            "dramatiq-default",
            f"dramatiq -p {dp} -t {dt} (defaults)",
            "default",
            True,
            "threads",
            lambda p, u, lg: dramatiq_sync(p, u, lg, None, None),
        ),
        Config(
            "celery-prefork",
            f"raw Celery prefork -c {cores} (defaults)",
            "default",
            True,
            "threads",
            lambda p, u, lg: celery_sync(p, u, lg, "prefork", cores),
        ),
        Config(
            "dramatiq-tuned",
            f"dramatiq -p {dp} -t 16",
            "tuned",
            True,
            "threads",
            lambda p, u, lg: dramatiq_sync(p, u, lg, dp, 16),
        ),
        Config(
            "celery-threads",
            "raw Celery threads -c 8",
            "tuned",
            True,
            "threads",
            lambda p, u, lg: celery_sync(p, u, lg, "threads", 8),
        ),
        Config(
            "toolq-prefork",
            f"toolq prefork -c {cores} (defaults)",
            "default",
            False,
            "threads",
            lambda p, u, lg: toolq_sync(p, u, lg, "prefork", cores),
        ),
        Config(
            "toolq-prefork-8",
            "toolq prefork -c 8",
            "tuned",
            False,
            "threads",
            lambda p, u, lg: toolq_sync(p, u, lg, "prefork", 8),
        ),
        Config(
            "toolq-threads",
            "toolq threads -c 8",
            "tuned",
            False,
            "threads",
            lambda p, u, lg: toolq_sync(p, u, lg, "threads", 8),
        ),
        Config(
            "toolq-threads-x",
            f"toolq {cores} x threads -c 8 (a worker per core)",
            "tuned",
            False,
            "threads",
            lambda p, u, lg: toolq_sync(p, u, lg, "threads", 8, cores),
        ),
        Config(
            "taskiq-default",
            "taskiq -w 2, wait_result poll 0.2 s (defaults)",
            "default",
            True,
            "asyncio",
            lambda p, u, lg: taskiq_async(p, u, lg, 0.2),
        ),
        Config(
            "taskiq-tuned",
            "taskiq -w 2, wait_result poll 0.01 s",
            "tuned",
            True,
            "asyncio",
            lambda p, u, lg: taskiq_async(p, u, lg, 0.01),
        ),
        Config(
            "arq-default",
            f"arq, {cores} worker processes, poll 0.5 s (defaults)",
            "default",
            True,
            "asyncio",
            lambda p, u, lg: arq_async(p, u, lg, 0.5, cores),
        ),
        Config(
            "arq-tuned",
            f"arq, {cores} worker processes, poll 0.005 s",
            "tuned",
            True,
            "asyncio",
            lambda p, u, lg: arq_async(p, u, lg, 0.005, cores),
        ),
        Config(
            "toolq-async-prefork",
            f"toolq AsyncClient, prefork -c {cores} (defaults)",
            "default",
            False,
            "asyncio",
            lambda p, u, lg: toolq_async(p, u, lg, "prefork", cores),
        ),
        Config(
            "toolq-async-threads",
            "toolq AsyncClient, threads -c 8",
            "tuned",
            False,
            "asyncio",
            lambda p, u, lg: toolq_async(p, u, lg, "threads", 8),
        ),
        Config(
            "toolq-async-threads-x",
            f"toolq AsyncClient, {cores} x threads -c 8 (a worker per core)",
            "tuned",
            False,
            "asyncio",
            lambda p, u, lg: toolq_async(p, u, lg, "threads", 8, cores),
        ),
    ]
    return out


# -- the run ---------------------------------------------------------------------------------


def one_count(running: Running, kind: str, count: int, turns: int, watch: redis.Redis) -> Outcome:
    """One measured run of ``count`` conversations, after a short unmeasured warm-up."""
    pids = running.worker_pids
    remote, turn = running.remote, running.turn
    if remote is not None:
        remote(min(count, 8), 3)
        return measured(lambda: remote(count, turns), pids, watch)
    assert turn is not None
    if kind == "threads":
        run_threads(turn, min(count, 8), 3)
        return measured(lambda: run_threads(turn, count, turns), pids, watch)
    run_tasks(turn, min(count, 8), 3)
    return measured(lambda: run_tasks(turn, count, turns), pids, watch)


def run_config(
    config: Config, procs: Procs, url: str, logs: Path, counts: list[int], turns: int
) -> dict[int, Outcome | str]:
    """Start ``config``, warm it up, run each conversation count; stop it."""
    watch = redis.Redis.from_url(url)
    watch.flushdb()
    log = logs / f"{config.key}.log"
    results: dict[int, Outcome | str] = {}
    try:
        with config.start(procs, url, log) as running:
            for count in counts:
                results[count] = one_count(running, config.kind, count, turns, watch)
    except Exception as exc:
        reason = f"NOT MEASURED: {type(exc).__name__}: {exc}"[:300]
        print(f"  {config.label}: {reason}\n{tail(log)}", flush=True)
        for count in counts:
            results.setdefault(count, reason)
    finally:
        watch.close()
    return results


def summary(out: Outcome | str) -> Any:
    return out.summary() if isinstance(out, Outcome) else out


def median_outcome(outcomes: list[Outcome]) -> Outcome:
    """The round whose calls/s is the median (the lower middle of an even count)."""
    ranked = sorted(outcomes, key=lambda o: o.calls_per_s)
    return ranked[(len(ranked) - 1) // 2]


def fmt(value: float, digits: int = 0) -> str:
    if value != value:  # NaN
        return "-"
    return f"{value:,.{digits}f}"


def table(
    chosen: list[Config], merged: dict[str, dict[int, Outcome | str]], counts: dict[str, list[int]]
) -> str:
    """Every configuration and count, with the ratio to the best peer at that count."""
    best: dict[tuple[str, int], float] = {}
    for config in chosen:
        if not config.peer:
            continue
        for count, out in merged[config.key].items():
            if isinstance(out, Outcome):
                k = (config.kind, count)
                best[k] = max(best.get(k, 0.0), out.calls_per_s)
    head = (
        "| system | clients | conversations | calls/s | turn p50 ms | turn p99 ms "
        "| x best peer | CPU µs/call client | worker | Redis | Redis cmds/call "
        "| Redis reads/call | errors |"
    )
    lines = [head, "|" + "---|" * 13]
    for config in chosen:
        for count in counts[config.kind]:
            out = merged[config.key].get(count)
            if not isinstance(out, Outcome):
                lines.append(
                    f"| {config.label} | {config.kind} | {count} | {out or 'not run'} "
                    "| | | | | | | | | |"
                )
                continue
            s = out.summary()
            peer = best.get((config.kind, count), 0.0)
            ratio = f"{out.calls_per_s / peer:.2f}x" if peer and out.calls_per_s else "-"
            cpu = s["cpu_us_per_call"]
            errors = f"{out.errors} ({out.first_error})" if out.errors else "0"
            lines.append(
                f"| {config.label} | {config.kind} | {count} | {fmt(out.calls_per_s)} "
                f"| {fmt(s['turn_p50_ms'], 1)} | {fmt(s['turn_p99_ms'], 1)} | {ratio} "
                f"| {fmt(cpu['client'])} | {fmt(cpu['worker'])} | {fmt(cpu['redis'])} "
                f"| {fmt(s['redis_commands_per_call'], 1)} "
                f"| {fmt(s['redis_reads_per_call'], 1)} | {errors} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="defaults only, small, < 1 min")
    parser.add_argument("--conversations", default="32,256", help="thread conversation counts")
    parser.add_argument("--async-conversations", default="1000", help="asyncio task counts")
    parser.add_argument("--turns", type=int, default=20, help="turns per thread conversation")
    parser.add_argument("--async-turns", type=int, default=20, help="turns per asyncio one")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--systems", default="", help="comma-separated config keys (default all)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    cores = psutil.cpu_count() or 1
    all_configs = configs(cores)
    thread_counts = [int(x) for x in args.conversations.split(",") if x]
    async_counts = [int(x) for x in args.async_conversations.split(",") if x]
    turns, async_turns, rounds = args.turns, args.async_turns, args.rounds
    if args.quick:
        thread_counts, async_counts, turns, async_turns, rounds = [32], [50], 3, 3, 1
        keep = {"dramatiq-default", "celery-prefork", "toolq-prefork", "toolq-async-prefork"}
        all_configs = [c for c in all_configs if c.key in keep]
    if args.systems:
        wanted = set(args.systems.split(","))
        all_configs = [c for c in all_configs if c.key in wanted]
    counts = {"threads": thread_counts, "asyncio": async_counts}
    signal.signal(signal.SIGTERM, exit_on_signal)
    command = "python -m bench.agent " + " ".join(sys.argv[1:] if argv is None else argv)
    print(
        f"# {command}\n# {cores} cores; turns: {turns} (threads), {async_turns} (asyncio); "
        f"rounds {rounds}",
        flush=True,
    )
    logs = Path(tempfile.mkdtemp(prefix="bench-agent-"))
    procs = Procs()
    rounds_out: dict[str, list[dict[int, Outcome | str]]] = {c.key: [] for c in all_configs}
    try:
        with bench_redis(None) as url:
            for r in range(rounds):
                order = all_configs if r % 2 == 0 else list(reversed(all_configs))
                for config in order:
                    print(f"round {r + 1}: {config.label}", flush=True)
                    n = turns if config.kind == "threads" else async_turns
                    got = run_config(config, procs, url, logs, counts[config.kind], n)
                    for count, out in got.items():
                        if isinstance(out, Outcome):
                            print(
                                f"  {count} conversations: {out.calls_per_s:,.0f} calls/s, "
                                f"p50 {percentile(out.turn_ms, 50):.1f} ms, "
                                f"errors {out.errors} {out.first_error}",
                                flush=True,
                            )
                    rounds_out[config.key].append(got)
    finally:
        procs.stop_all()
    merged: dict[str, dict[int, Outcome | str]] = {}
    for config in all_configs:
        merged[config.key] = {}
        for count in counts[config.kind]:
            runs = [g[count] for g in rounds_out[config.key] if count in g]
            ok = [o for o in runs if isinstance(o, Outcome)]
            merged[config.key][count] = median_outcome(ok) if ok else (runs[0] if runs else "")
    print()
    print(table(all_configs, merged, counts))
    print(f"\nworker logs: {logs}")
    if args.json is not None:
        data = {
            "command": command,
            "cores": cores,
            "turns": turns,
            "async_turns": async_turns,
            "rounds": rounds,
            "results": {
                c.key: {
                    "label": c.label,
                    "tuning": c.tuning,
                    "peer": c.peer,
                    "kind": c.kind,
                    "by_conversations": {str(n): summary(o) for n, o in merged[c.key].items()},
                    "rounds": [
                        {
                            str(n): (o.summary() if isinstance(o, Outcome) else o)
                            for n, o in g.items()
                        }
                        for g in rounds_out[c.key]
                    ],
                }
                for c in all_configs
            },
        }
        args.json.write_text(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
