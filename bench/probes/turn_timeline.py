"""Where an agent turn's time goes: the agent workload's turns split by the calls' records.

    python -m bench.probes.turn_timeline [--pool threads] [--concurrency 8] [--processes 2]
                                         [--conversations 32] [--turns 40]

On a private Redis, ``--processes`` ``toolq worker`` processes (``bench.peers.apps``); this
process runs ``bench.agent``'s conversations (turn k: ``k % 3 + 1`` no-op calls, dispatch and
wait) and then reads every call's ``created_at``, ``started_at`` and ``finished_at`` (the
clocks of this machine's processes: the client's for the first, the worker's for the others)
to split each turn: the dispatch (before the record's creation: waiting for company or for a
round trip in flight; after it: the round trip's rest), the wait for a slot (creation to
start), the run (start to finish), and the last finish to the client's wake-up. Prints p50,
p90 and mean of each, in ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.agent import run_threads  # noqa: E402
from bench.figures import percentile  # noqa: E402
from bench.peers.toolq_side import ToolqWorker  # noqa: E402
from bench.procs import Procs, bench_redis  # noqa: E402


def line(name: str, values: list[float]) -> str:
    return (
        f"| {name} | {percentile(values, 50):.2f} | {percentile(values, 90):.2f} "
        f"| {statistics.mean(values):.2f} |"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--pool", default="threads")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--processes", type=int, default=2, help="worker processes")
    p.add_argument("--conversations", type=int, default=32)
    p.add_argument("--turns", type=int, default=40)
    args = p.parse_args(argv)
    turns: list[tuple[float, float, float, list[str]]] = []
    lock = threading.Lock()
    with bench_redis(None) as url, tempfile.TemporaryDirectory() as tmp:
        procs = Procs()
        with ToolqWorker(
            procs,
            url,
            pool=args.pool,
            concurrency=args.concurrency,
            log=Path(tmp) / "worker.log",
            processes=args.processes,
        ) as side:
            client = side.client

            def turn(n: int) -> None:
                calls = [
                    {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}}
                    for _ in range(n)
                ]
                sent = time.time()
                batch = client.dispatch(calls)
                returned = time.time()
                results = batch.wait(timeout=60)
                woken = time.time()
                with lock:
                    turns.append((sent, returned, woken, [r.call_id for r in results]))

            run_threads(turn, args.conversations, 3)  # warm up
            turns.clear()
            out = run_threads(turn, args.conversations, args.turns)
            before, after, waiting, running, waking, total = [], [], [], [], [], []
            for sent, returned, woken, ids in turns:
                records = client.store.records(ids)
                times = [
                    (float(r["created_at"]), float(r["started_at"]), float(r["finished_at"]))
                    for r in records
                ]
                total.append((woken - sent) * 1000)
                before.append((times[0][0] - sent) * 1000)
                after.append((returned - times[0][0]) * 1000)
                waiting += [(s - c) * 1000 for c, s, _ in times]
                running += [(f - s) * 1000 for _, s, f in times]
                waking.append((woken - max(f for *_, f in times)) * 1000)
    shape = f"{args.processes} x {args.pool} -c {args.concurrency}"
    print(f"# {shape}, {args.conversations} conversations x {args.turns} turns: {out.calls} calls")
    print("| part of a turn | p50 ms | p90 ms | mean ms |")
    print("|---|---|---|---|")
    print(line("whole turn (dispatch to results)", total))
    print(line("dispatch, before the record exists", before))
    print(line("dispatch, after (its round trip's rest)", after))
    print(line("call: created to started", waiting))
    print(line("call: started to finished", running))
    print(line("last finish to the client woken", waking))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
