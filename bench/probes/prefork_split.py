"""A prefork worker's CPU per call, parent (Celery's consumer) and children apart.

```bash
python -m bench.probes.prefork_split                  # 32 conversations x 40 turns, -c 2
python -m bench.probes.prefork_split --spy            # and a py-spy --gil profile per process
```

Starts a private Redis and one ``toolq worker`` (``bench.agent``'s agent workload, no-op
calls), and prints each process's CPU µs per call, the worker's total, and Redis's commands
per call by name (``INFO commandstats``). With ``--spy``, ``py-spy record --gil`` samples
each process on its own (``bench.probes.agent_profile`` summarizes a folded file).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import redis

from bench.agent import run_threads, toolq_sync
from bench.procs import Procs, bench_redis


def cpu_s(proc: psutil.Process) -> float:
    """User + system CPU seconds of one process."""
    times = proc.cpu_times()
    return times.user + times.system


def commands(client: redis.Redis) -> dict[str, int]:
    """Commands Redis served so far, by name (``INFO`` itself left out)."""
    stats: dict[str, dict[str, int]] = client.info("commandstats")  # type: ignore[assignment]
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items() if k != "cmdstat_info"}


def spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """``py-spy record --gil`` of one process into ``out`` (folded stacks)."""
    argv = [
        "py-spy",
        "record",
        "--gil",
        "-r",
        "250",
        "-f",
        "raw",
        "-o",
        str(out),
        "--pid",
        str(pid),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.prefork_split")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--spy", action="store_true")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="prefork-split-"))
    procs = Procs()
    with bench_redis(None) as url:
        watch = redis.Redis.from_url(url)
        try:
            with toolq_sync(procs, url, out / "worker.log", "prefork", args.concurrency) as run:
                run_threads(run.turn, 8, 3)  # warm: children forked, scripts loaded
                parent = psutil.Process(run.worker_pid)
                tree = [parent, *parent.children(recursive=True)]
                spies = [spy(p.pid, out / f"{p.pid}.folded") for p in tree] if args.spy else []
                time.sleep(1.5 if spies else 0)  # py-spy attaches
                cpu0, commands0 = {p.pid: cpu_s(p) for p in tree}, commands(watch)
                outcome = run_threads(run.turn, args.conversations, args.turns)
                cpu1, commands1 = {p.pid: cpu_s(p) for p in tree}, commands(watch)
                for s in spies:
                    s.send_signal(2)
                    s.wait(60)
        finally:
            procs.stop_all()
    n = max(outcome.calls, 1)
    print(f"# python -m bench.probes.prefork_split {' '.join(sys.argv[1:])}")
    print(f"{outcome.calls} calls in {outcome.wall_s:.1f} s, {outcome.errors} errors")
    for p in tree:
        role = "parent" if p.pid == parent.pid else "child"
        print(f"  {role} {p.pid}: {1e6 * (cpu1[p.pid] - cpu0[p.pid]) / n:.0f} µs/call")
    print(f"worker: {1e6 * sum(cpu1[k] - cpu0[k] for k in cpu1) / n:.0f} µs/call")
    delta = {k: v - commands0.get(k, 0) for k, v in commands1.items() if v > commands0.get(k, 0)}
    by_name = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(delta.items(), key=lambda kv: -kv[1]))
    print(f"Redis: {sum(delta.values()) / n:.2f} commands/call ({by_name})")
    if spies:
        print(f"profiles: {out}/<pid>.folded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
