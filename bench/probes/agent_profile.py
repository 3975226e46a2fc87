"""Where toolq's CPU goes in the agent workload: ``py-spy --gil`` on the client and the worker.

```bash
python -m bench.probes.agent_profile                  # 32 conversations x 10 turns, prefork -c 2
python -m bench.probes.agent_profile --pool threads --concurrency 8
```

Starts a private Redis and one ``toolq worker``, runs ``bench.agent``'s conversations in
this process, and samples this process and the worker's process tree with ``py-spy record
--gil`` (only the thread holding the GIL is sampled, so the samples are CPU, not waits;
needs ``pip install py-spy`` and ptrace rights). Prints, per side, the share of samples by
innermost frame and inclusively by function of toolq, redis-py, Celery, kombu and billiard.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.agent import run_threads, toolq_sync
from bench.procs import Procs, bench_redis

LIBRARIES = ("toolq/", "redis/", "celery/", "kombu/", "billiard/")


def spy(pid: int, out: Path, subprocesses: bool) -> subprocess.Popen[bytes]:
    argv = ["py-spy", "record", "--gil", "-r", "200", "-f", "raw", "-o", str(out)]
    argv += ["--subprocesses"] if subprocesses else []
    return subprocess.Popen(
        [*argv, "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def frame_name(frame: str) -> str:
    """``function (file)`` with the file shortened to its package path."""
    name, _, where = frame.partition(" (")
    path = where.split(":")[0].split("site-packages/")[-1]
    return f"{name} ({path.split('agentbench/')[-1]})"


def summarize(folded: Path, top: int) -> str:
    """Shares of samples by innermost frame and inclusively by library function."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        total += n
        own[frame_name(frames[-1])] += n
        for name in {frame_name(f) for f in frames if any(lib in f for lib in LIBRARIES)}:
            inclusive[name] += n
    lines = [f"samples: {total}", "by innermost frame:"]
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in own.most_common(top)]
    lines.append("inclusive (toolq, redis-py, Celery, kombu, billiard):")
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in inclusive.most_common(top * 2)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.agent_profile")
    parser.add_argument("--pool", default="prefork")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="agent-profile-"))
    procs = Procs()
    with bench_redis(None) as url:
        try:
            with toolq_sync(procs, url, out / "worker.log", args.pool, args.concurrency) as run:
                run_threads(run.turn, 8, 3)
                spies = [
                    spy(run.worker_pid, out / "worker.folded", True),
                    spy(os.getpid(), out / "client.folded", False),
                ]
                time.sleep(1.5)  # py-spy attaches
                outcome = run_threads(run.turn, args.conversations, args.turns)
                for s in spies:
                    s.send_signal(2)
                    s.wait(60)
        finally:
            procs.stop_all()
    print(
        f"# {' '.join(['python -m bench.probes.agent_profile', *sys.argv[1:]])}\n"
        f"# {outcome.calls} calls in {outcome.wall_s:.1f} s, {outcome.errors} errors"
    )
    for side in ("client", "worker"):
        print(f"\n## {side}\n{summarize(out / f'{side}.folded', args.top)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
