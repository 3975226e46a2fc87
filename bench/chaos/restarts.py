"""Measure what ``toolq worker`` does when Redis restarts under it.

    python -m bench.chaos.restarts --workers 3 --restarts 10 --out /tmp/restarts

Starts a private Redis (AOF) and ``--workers`` idle-but-fed workers (one per pool kind),
keeps a trickle of calls flowing, SIGKILLs and restarts Redis ``--restarts`` times, and
counts for each worker whether it kept serving or exited (with which status and last
log line). Prints one JSON report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from pathlib import Path

import redis

from bench.chaos.app import registry
from bench.chaos.faults import WorkerPool, WorkerSpec
from bench.chaos.server import PrivateRedis
from toolq import Client, Settings

POOL_KINDS = (("prefork", 2), ("threads", 3), ("solo", 1))


def _feed(client: Client, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        with contextlib.suppress(Exception):  # Redis is down half of the time here
            client.dispatch(
                [
                    {"id": f"f{n}-{i}", "name": "fast_echo", "arguments": {"text": "x"}}
                    for i in range(3)
                ],
                run_id=f"feed-{n}",
            )
        stop.wait(0.1)


def measure(
    out: Path, workers: int, restarts: int, outage: float, every: float
) -> dict[str, object]:
    """Restart Redis ``restarts`` times under the workers; what each worker did."""
    out.mkdir(parents=True, exist_ok=True)
    server = PrivateRedis(out / "redis")
    server.start()
    specs = [
        WorkerSpec(f"w{i}", "safe,moderate,dangerous", *POOL_KINDS[i % len(POOL_KINDS)])
        for i in range(workers)
    ]
    pool = WorkerPool(specs, server.url, out, {"TOOLQ_SWEEP_INTERVAL": "0.25"})
    client = Client(registry, Settings(redis_url=server.url, app="bench.chaos.app:registry"))
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(client, stop), daemon=True)
    exits: list[dict[str, object]] = []
    try:
        pool.start_all()
        time.sleep(5)
        feeder.start()
        for n in range(restarts):
            time.sleep(every)
            server.kill9()
            time.sleep(outage)
            server.start()
            for name, proc in list(pool.procs.items()):
                if proc.poll() is not None:
                    log = (out / "workers" / f"{name}.log").read_text(errors="replace")
                    lines = [ln for ln in log.splitlines() if ln.strip()]
                    exits.append(
                        {
                            "restart": n,
                            "worker": name,
                            "pool": pool.specs[name].pool,
                            "code": proc.returncode,
                            "last": lines[-1] if lines else "",
                        }
                    )
                    pool.start(name)
        time.sleep(every)
        for name, proc in list(pool.procs.items()):
            if proc.poll() is not None:
                exits.append({"restart": restarts, "worker": name, "code": proc.returncode})
        serving = redis.Redis.from_url(server.url).keys("toolq:worker:*")
        return {
            "restarts": restarts,
            "workers": workers,
            "exits": exits,
            "heartbeats_at_end": len(serving),
        }
    finally:
        stop.set()
        client.close()
        pool.stop_all()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(prog="python -m bench.chaos.restarts", description=__doc__)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--restarts", type=int, default=10)
    p.add_argument("--outage", type=float, default=1.0)
    p.add_argument("--every", type=float, default=4.0)
    p.add_argument("--out", type=Path, default=Path("/tmp/toolq-restarts"))
    a = p.parse_args(argv)
    print(json.dumps(measure(a.out, a.workers, a.restarts, a.outage, a.every), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
