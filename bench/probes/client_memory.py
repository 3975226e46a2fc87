"""Does a long-lived client's memory grow? The agent workload for minutes, with ``tracemalloc``.

```bash
python -m bench.probes.client_memory --minutes 8 --conversations 32
```

Starts a private Redis and one ``toolq worker`` (threads pool), then runs rounds of
``bench.agent``'s conversations (each turn a new dispatch, 1-3 no-op calls) in this process
with ``tracemalloc`` on (25 frames). After each round one line: calls done, this process's
resident memory (the tracer's own overhead and the snapshots' copies included), the memory
``tracemalloc`` sees (Python's allocations), and the worker's resident memory (its process
tree). At the end, the 15 places whose allocations grew most between the snapshot
after the first round (warm) and the last: a leak shows as a line that grows with the calls.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.agent import run_threads, toolq_sync
from bench.probes.soak import tree_rss
from bench.procs import Procs, bench_redis


def own_rss() -> int:
    """This process's resident memory (bytes), without its children (Redis, the worker)."""
    status = Path("/proc/self/status").read_text()
    return next(int(x.split()[1]) * 1024 for x in status.splitlines() if x.startswith("VmRSS:"))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.client_memory")
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--turns", type=int, default=30, help="turns per conversation a round")
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--no-trace", action="store_true", help="resident memory only, without tracemalloc"
    )
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="client-memory-"))
    procs = Procs()
    if not args.no_trace:
        tracemalloc.start(25)
    print(f"# {' '.join(['python -m bench.probes.client_memory', *sys.argv[1:]])}")
    print(f"{'t_s':>6} {'calls':>9} {'client_MiB':>10} {'traced_MiB':>10} {'worker_MiB':>10}")
    with bench_redis(None) as url:
        try:
            with toolq_sync(procs, url, out / "worker.log", args.pool, args.concurrency) as run:
                start = time.monotonic()
                calls, warm = 0, None
                while time.monotonic() - start < args.minutes * 60:
                    outcome = run_threads(run.turn, args.conversations, args.turns)
                    calls += outcome.calls
                    if outcome.errors:
                        print(f"errors: {outcome.errors} ({outcome.first_error})")
                    traced = tracemalloc.get_traced_memory()[0]
                    if tracemalloc.is_tracing() and warm is None:
                        warm = tracemalloc.take_snapshot()
                    worker = sum(tree_rss(pid) for pid in run.worker_pids or [run.worker_pid])
                    print(
                        f"{time.monotonic() - start:6.0f} {calls:9,d} "
                        f"{own_rss() / 2**20:10.1f} "
                        f"{traced / 2**20:10.1f} {worker / 2**20:10.1f}",
                        flush=True,
                    )
                last = tracemalloc.take_snapshot() if warm is not None else None
        finally:
            procs.stop_all()
    if warm is None or last is None:
        return 0
    print("\ngrowth since the first round, by place of allocation:")
    for stat in last.compare_to(warm, "lineno")[:15]:
        print(
            f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+8d} blocks  {stat.traceback[0]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
