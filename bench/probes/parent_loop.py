"""A prefork parent's own work per task, without Redis: its result pipes and kombu's reads.

```bash
python -m bench.probes.parent_loop                   # 3000 tasks on 2 children, 1e6 reads
python -m bench.probes.parent_loop --interleave 8    # Celery's handler and toolq's, in turns
```

Runs Celery's prefork pool (``AsynPool``, real children) on kombu's event loop (``Hub``) in
this process, two tasks in flight, and prints this process's CPU µs per task (the children
are other processes): sending the job, reading the child's two messages from its result
pipe, the callbacks. Then the ns per read of a value a kombu ``cached_property`` has cached
(as Celery's consumer reads ``Channel.client``, ``QoS.unacked_key``, ``app.conf``). With
toolq's patches installed as a worker installs them (``patch_kombu``, and
``patch_result_handler`` where the code has it), so the same file run from two worktrees
compares their code. ``--interleave N`` runs N blocks of tasks in this one process instead,
Celery's own result handler and toolq's in turns (A B B A ...), each block on a new pool:
on a loaded machine, a ratio per pair of neighbouring blocks is steadier than one across
processes.
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit

from celery.concurrency.asynpool import AsynPool
from kombu.asynchronous import Hub
from kombu.utils.objects import cached_property

from toolq.broker import patch_kombu


def noop(n: int) -> int:
    """The task: nothing, so the parent's share is what is measured."""
    return n


class Cached:
    """One kombu ``cached_property``."""

    @cached_property
    def value(self) -> int:
        return 1


def pipe_us_per_task(tasks: int, processes: int) -> float:
    """This process's CPU µs per task, ``processes`` tasks in flight."""
    hub = Hub()
    pool = AsynPool(processes=processes, threads=False)
    done: list[int] = []
    try:
        pool.register_with_event_loop(hub)
        for n in range(processes):  # warm: children started
            pool.apply_async(noop, (n,), callback=done.append)
        while len(done) < processes:
            hub.run_once()
        done.clear()
        sent = 0
        cpu0 = time.process_time()
        while len(done) < tasks:
            while sent - len(done) < processes and sent < tasks:
                pool.apply_async(noop, (sent,), callback=done.append)
                sent += 1
            hub.run_once()
        return 1e6 * (time.process_time() - cpu0) / tasks
    finally:
        pool.terminate()
        pool.join()
        hub.close()


def interleaved(blocks: int, tasks: int, processes: int) -> None:
    """Print CPU µs per task of blocks with Celery's result handler and toolq's, alternated."""
    from celery.concurrency.asynpool import ResultHandler

    from toolq.workers import pool

    pool.patch_result_handler()
    ours = ResultHandler._make_process_result
    theirs = pool._CELERY_MAKE_PROCESS_RESULT
    order = ["celery", "toolq", "toolq", "celery"] * (blocks // 4 + 1)
    seen: dict[str, list[float]] = {"celery": [], "toolq": []}
    for side in order[:blocks]:
        ResultHandler._make_process_result = theirs if side == "celery" else ours
        seen[side].append(pipe_us_per_task(tasks, processes))
    ResultHandler._make_process_result = ours
    pairs = [t / c for c, t in zip(seen["celery"], seen["toolq"], strict=False)]
    print(f"celery's handler: {', '.join(f'{x:.1f}' for x in seen['celery'])} µs per task")
    print(f"toolq's handler:  {', '.join(f'{x:.1f}' for x in seen['toolq'])} µs per task")
    print(f"toolq/celery per pair: {', '.join(f'{x:.2f}' for x in pairs)}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.parent_loop")
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--reads", type=int, default=1_000_000)
    parser.add_argument("--interleave", type=int, default=0, metavar="BLOCKS")
    args = parser.parse_args()
    patch_kombu()
    if args.interleave:
        print(f"# python -m bench.probes.parent_loop {' '.join(sys.argv[1:])}")
        interleaved(args.interleave, args.tasks, args.processes)
        return 0
    try:
        from toolq.workers.pool import patch_result_handler  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        patched = "no"
    else:
        patch_result_handler()
        patched = "yes"
    us = pipe_us_per_task(args.tasks, args.processes)
    cached = Cached()
    ns = 1e9 * min(timeit.repeat(lambda: cached.value, number=args.reads // 5, repeat=5))
    ns /= args.reads // 5
    print(f"# python -m bench.probes.parent_loop {' '.join(sys.argv[1:])}")
    print(f"result handler patched: {patched}")
    print(f"parent: {us:.1f} µs CPU per task ({args.tasks} tasks, {args.processes} children)")
    print(f"cached_property read: {ns:.0f} ns (a cached value; best of 5 x {args.reads // 5})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
