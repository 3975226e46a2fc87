"""Slots, spread and rate: what ``--concurrency``, give-back and ``Readmit`` deliver.

    python -m bench.probes.slots [--rounds 3] [--json PATH]

On a private Redis, ``toolq worker`` processes serving ``bench.probes.slots_app``:

- **CPU spread**: one dispatch of 16 calls that each spend 0.25 s of CPU (one shared
  message), on one ``--pool prefork -c 2`` worker, then on two ``-c 1`` workers: wall time
  (dispatch to last result) against the ideal 2.0 s (16 x 0.25 s over two processes), and
  the processes that ran them, and the slots' occupancy (the calls' run time over the slots'
  time from first start to last end: 1.0 when no slot idled while a call waited, whatever
  the machine's load, which stretches the wall time). Target: within 1.3x of the ideal.
- **Slots**: one dispatch of 40 calls sleeping 0.2 s on ``--pool threads -c 4``: the most
  that ran at once (counted by the tool in Redis). Target: 4.
- **Rate**: 40 calls of a ``rate_limit="4/s"`` tool at once, sweeps at the default 1 s:
  the delivered rate (4 starts per mean time 4 consecutive starts span, START's times) and
  the most starts in any 1 s. Target: at least 0.9x the rate, never above it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.peers.toolq_side import toolq_argv  # noqa: E402
from bench.probes.redis_cost import private_redis  # noqa: E402
from bench.probes.slots_app import PIDS, SEEN, registry  # noqa: E402
from bench.procs import Procs, worker_env  # noqa: E402
from toolq import CallStatus, Client, Settings  # noqa: E402
from toolq.cli.check import live_workers  # noqa: E402

APP = "bench.probes.slots_app:registry"
SPREAD_TARGET = 1.3
RATE_TARGET = 0.9


def start_workers(procs: Procs, url: str, shapes: list[tuple[str, int]], **env: str) -> list[Any]:
    """``toolq worker`` processes of ``(pool, concurrency)`` shapes, once all are live."""
    started = [
        procs.start(toolq_argv(pool, c, APP), {**worker_env(url), **env}) for pool, c in shapes
    ]
    settings = Settings(redis_url=url)
    deadline = time.monotonic() + 60
    while len(live_workers(settings)) < len(shapes):
        if time.monotonic() > deadline:
            raise RuntimeError("workers not live after 60 s")
        time.sleep(0.1)
    return started


def dispatch(client: Client, name: str, arguments: list[dict[str, Any]]) -> tuple[float, Any]:
    """Wall time of one dispatch of ``name`` calls until every result, and the batch."""
    payload = [{"id": uuid.uuid4().hex, "name": name, "arguments": a} for a in arguments]
    t0 = time.perf_counter()
    batch = client.dispatch(payload)
    results = batch.wait(timeout=120)
    wall = time.perf_counter() - t0
    if any(r.status is not CallStatus.SUCCEEDED for r in results):
        raise RuntimeError(f"{name}: not every call succeeded")
    return wall, batch


def occupancy(records: list[dict[str, str] | None], slots: int) -> float:
    """Slot-seconds the calls ran over the slot-seconds from first start to last end.

    Independent of how busy the machine is: 1.0 when no slot idled while calls waited.
    """
    spans = [(float(r["started_at"]), float(r["finished_at"])) for r in records if r]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    return sum(e - s for s, e in spans) / (slots * (last - first))


def spread(url: str, shapes: list[tuple[str, int]], rounds: int) -> dict[str, Any]:
    """16 x 0.25 s of CPU in one dispatch: wall time against the ideal, processes used."""
    procs = Procs()
    r = redis.Redis.from_url(url)
    try:
        start_workers(procs, url, shapes)
        slots = sum(c for _, c in shapes)
        ideal = 16 * 0.25 / slots
        walls, used, busy = [], [], []
        with Client(registry, Settings(redis_url=url)) as client:
            dispatch(client, "burn", [{"seconds": 0.01}] * 4)  # warm up
            for _ in range(rounds):
                r.delete(PIDS)
                wall, batch = dispatch(client, "burn", [{"seconds": 0.25}] * 16)
                walls.append(wall)
                used.append(len(set(r.lrange(PIDS, 0, -1))))
                busy.append(occupancy(client.store.records(batch.call_ids), slots))
        wall = statistics.median(walls)
        return {"walls_s": walls, "wall_s": wall, "ideal_s": ideal, "ratio": wall / ideal,
                "processes_used": used, "occupancy": busy}  # fmt: skip
    finally:
        procs.stop_all()
        r.close()


def most_at_once(url: str) -> dict[str, Any]:
    """40 calls sleeping 0.2 s on ``--pool threads -c 4``: the most running at once."""
    procs = Procs()
    r = redis.Redis.from_url(url)
    try:
        start_workers(procs, url, [("threads", 4)])
        r.delete(SEEN)
        with Client(registry, Settings(redis_url=url)) as client:
            wall, _ = dispatch(client, "nap", [{"seconds": 0.2}] * 40)
        return {"most": max(int(x) for x in r.lrange(SEEN, 0, -1)), "wall_s": wall}
    finally:
        procs.stop_all()
        r.close()


def rate(url: str) -> dict[str, Any]:
    """40 calls of a 4/s tool at once: the delivered rate and the most starts in 1 s."""
    procs = Procs()
    try:
        start_workers(procs, url, [("threads", 4)], TOOLQ_SWEEP_INTERVAL="1")
        with Client(registry, Settings(redis_url=url)) as client:
            _, batch = dispatch(client, "tick", [{"n": i} for i in range(40)])
            records = client.store.records(batch.call_ids)
        starts = sorted(float(rec["started_at"]) for rec in records if rec)
        spans = [b - a for a, b in zip(starts, starts[4:], strict=False)]
        delivered = 4 / statistics.mean(spans)
        most = max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts)
        return {"delivered_per_s": delivered, "configured_per_s": 4.0,
                "ratio": delivered / 4.0, "most_in_1s": most}  # fmt: skip
    finally:
        procs.stop_all()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    with private_redis() as server:
        url = server.url
        report = {
            "prefork -c 2": spread(url, [("prefork", 2)], args.rounds),
            "2 x prefork -c 1": spread(url, [("prefork", 1), ("prefork", 1)], args.rounds),
            "threads -c 4": most_at_once(url),
            "rate 4/s": rate(url),
        }
    ok = True
    for label in ("prefork -c 2", "2 x prefork -c 1"):
        row = report[label]
        good = row["ratio"] <= SPREAD_TARGET
        ok &= good
        walls = ", ".join(f"{w:.2f}" for w in row["walls_s"])
        print(f"{'PASS' if good else 'MISS'}  16 x 0.25 s CPU, {label}: {row['wall_s']:.2f} s "
              f"(runs {walls}), ideal {row['ideal_s']:.2f} s, {row['ratio']:.2f}x "
              f"(target <= {SPREAD_TARGET}x); processes used {row['processes_used']}; "
              f"slot occupancy {', '.join(f'{o:.2f}' for o in row['occupancy'])}")  # fmt: skip
    row = report["threads -c 4"]
    good = row["most"] == 4
    ok &= good
    print(f"{'PASS' if good else 'MISS'}  40 x 0.2 s sleep, threads -c 4: at most "
          f"{row['most']} at once, {row['wall_s']:.2f} s")  # fmt: skip
    row = report["rate 4/s"]
    good = row["ratio"] >= RATE_TARGET and row["most_in_1s"] <= 4
    ok &= good
    print(f"{'PASS' if good else 'MISS'}  rate_limit 4/s flooded with 40: "
          f"{row['delivered_per_s']:.2f} starts/s ({row['ratio']:.2f}x, target >= "
          f"{RATE_TARGET}x), most in any 1 s: {row['most_in_1s']}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
