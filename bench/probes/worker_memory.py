"""Does a long-lived worker's memory grow? The agent workload for minutes, the worker traced.

```bash
python -m bench.probes.worker_memory --minutes 8 --pool threads --concurrency 8
```

Starts a private Redis and one ``toolq worker`` serving ``bench.probes.traced_app:registry``
(the benchmark's tools, with ``tracemalloc`` on in the worker), then runs rounds of
``bench.agent``'s conversations (each turn a new dispatch of 1-3 no-op calls) from this
process. After each round one line: calls done, the worker's resident memory (its process
tree) and what ``tracemalloc`` sees in it (Python's allocations, the tracer's own overhead
apart). At the end, the 20 places whose allocations grew most between a snapshot after the
first round (warm) and one at the end: a leak is a place that grows with the calls. With the
prefork pool the traced figures are the parent's (the consumer); its children trace too, and
their snapshots are compared as well.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.agent import run_threads
from bench.peers.toolq_side import ToolqWorker
from bench.probes.soak import tree_rss
from bench.procs import Procs, bench_redis


def snapshots(folder: Path, name: str, pids: int, timeout: float = 120) -> list[Path]:
    """Ask every traced process for a snapshot named ``name``; their files."""
    (folder / f"{name}.want").touch()
    deadline = time.monotonic() + timeout
    while len(found := sorted(folder.glob(f"*.{name}.snapshot"))) < pids:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    time.sleep(2)  # the last one written whole
    return sorted(folder.glob(f"*.{name}.snapshot")) or found


def traced(folder: Path) -> tuple[int, int]:
    """Traced bytes and the tracer's overhead, summed over the worker's processes."""
    total = overhead = 0
    for path in folder.glob("*.stats.json"):
        try:
            stats = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        total += stats["traced"]
        overhead += stats["overhead"]
    return total, overhead


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.worker_memory")
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--turns", type=int, default=30, help="turns per conversation a round")
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="worker-memory-"))
    procs = Procs()
    print(f"# {' '.join(['python -m bench.probes.worker_memory', *sys.argv[1:]])}")
    print(f"{'t_s':>6} {'calls':>9} {'worker_MiB':>10} {'traced_MiB':>10} {'tracer_MiB':>10}")
    with bench_redis(None) as url:
        try:
            with ToolqWorker(
                procs,
                url,
                pool=args.pool,
                concurrency=args.concurrency,
                log=folder / "worker.log",
                app="bench.probes.traced_app:registry",
                env={"BENCH_TRACE_DIR": str(folder)},
            ) as side:
                client, pid = side.client, side.proc.pid

                def turn(n: int) -> None:
                    calls = [{"id": f"t{i}", "name": "noop", "arguments": {}} for i in range(n)]
                    client.dispatch(calls).wait(timeout=60)

                start = time.monotonic()
                calls, rounds = 0, 0
                while time.monotonic() - start < args.minutes * 60:
                    outcome = run_threads(turn, args.conversations, args.turns)
                    calls += outcome.calls
                    rounds += 1
                    if outcome.errors:
                        print(f"errors: {outcome.errors} ({outcome.first_error})")
                    time.sleep(1.2)  # the stats file of this moment
                    now, overhead = traced(folder)
                    print(
                        f"{time.monotonic() - start:6.0f} {calls:9,d} "
                        f"{tree_rss(pid) / 2**20:10.1f} {now / 2**20:10.1f} "
                        f"{overhead / 2**20:10.1f}",
                        flush=True,
                    )
                    if rounds == 1:
                        processes = len(list(folder.glob("*.stats.json")))
                        warm = snapshots(folder, "warm", processes)
                end = snapshots(folder, "end", len(warm))
        finally:
            procs.stop_all()
    for first, last in zip(warm, end, strict=False):
        print(f"\n{last.name}: growth since the first round, by place of allocation:")
        diff = tracemalloc.Snapshot.load(str(last)).compare_to(
            tracemalloc.Snapshot.load(str(first)), "traceback"
        )
        for stat in diff[:20]:
            print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+8d} blocks")
            for line in stat.traceback.format()[-6:]:
                print(f"      {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
