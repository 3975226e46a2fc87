"""The ``failover`` fault: SIGKILL the Redis master under load; Sentinel promotes its replica.

    python -m bench.chaos.failover --workers 2 --clients 3 --kills 3 --out /tmp/failover

Starts a master, one replica and a Sentinel (``bench/chaos/sentinel.py``), ``--workers``
``toolq worker`` processes and ``--clients`` agent loops (dispatch 1-3 calls, wait for
them), all through ``TOOLQ_SENTINELS`` with ``TOOLQ_MIN_REPLICAS_ACK=1``. ``--kills``
times: SIGKILL the current master, wait for the promotion, start the old node again
(Sentinel turns it into a replica of the new master) and wait until it is in sync. A
client retries a refused dispatch with the same ids until it is acknowledged. The handler
(not idempotent) appends each execution to a file. At the end every acknowledged call must
be on the final master and final; prints one JSON report: ``lost`` (acknowledged, not
there), ``unfinished``, ``duplicates`` (a handler ran twice), ``phantoms`` (ran, but no
record), ``taken_back`` (a final state a client saw, from its waits or from a reader
polling the newest calls' records and every run's events through the failovers, that the
final master does not have), all expected 0. Exit status 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import redis

from bench.chaos.sentinel import SentinelGroup
from toolq import CallStatus, Client, Settings, ToolContext, ToolRegistry
from toolq.errors import ReplicationError, WaitTimeoutError
from toolq.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
FINAL = {s.value for s in (CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.CANCELLED)}

registry = ToolRegistry()


@registry.tool()
def pay(amount: int, ctx: ToolContext) -> int:
    """Not idempotent: one line per execution in ``TOOLQ_FAILOVER_LOG``."""
    fd = os.open(os.environ["TOOLQ_FAILOVER_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{ctx.call_id}\n".encode())
    finally:
        os.close(fd)
    time.sleep(0.05)
    return amount


def _client_loop(
    n: int,
    client: Client,
    stop: threading.Event,
    acked: list[str],
    seen: dict[str, str],
    refusals: Counter[str],
) -> None:
    """An agent's turns: dispatch 1-3 calls, wait for them (what the wait reports is seen),
    next turn."""
    i = 0
    while not stop.is_set():
        i += 1
        payload = [
            {"id": f"c{n}-{i}-{k}", "name": "pay", "arguments": {"amount": i}}
            for k in range(1 + i % 3)
        ]
        while not stop.is_set():
            try:
                batch = client.dispatch(payload, run_id=f"client{n}")
            except (ReplicationError, redis.RedisError) as exc:
                refusals[type(exc).__name__] += 1
                time.sleep(0.2)
                continue  # the same ids again: safe to retry
            acked.extend(batch.call_ids)
            try:
                for result in batch.wait(timeout=30):
                    seen.setdefault(result.call_id, result.status.value)
            except (WaitTimeoutError, ReplicationError, redis.RedisError) as exc:
                refusals[f"wait {type(exc).__name__}"] += 1
            break


def _reader_loop(
    client: Client,
    stop: threading.Event,
    acked: list[str],
    runs: list[str],
    seen: dict[str, str],
    refusals: Counter[str],
) -> None:
    """Read outcomes as a client would, all through the failovers: the newest acknowledged
    calls' records, and each run's events; every final state seen, by call id."""
    after: dict[str, str | None] = dict.fromkeys(runs)
    while not stop.is_set():
        for call_id in acked[-20:]:
            try:
                result = client.result(call_id)
            except (ReplicationError, redis.RedisError) as exc:
                refusals[f"read {type(exc).__name__}"] += 1
                continue
            if result.status.value in FINAL:
                seen.setdefault(call_id, result.status.value)
        for run_id in runs:
            try:
                for event in client.events(run_id, after[run_id]):
                    after[run_id] = event.id
                    if event.type.is_final:
                        seen.setdefault(event.call_id, event.data.get("status", "?"))
            except (ReplicationError, redis.RedisError) as exc:
                refusals[f"events {type(exc).__name__}"] += 1
        time.sleep(0.05)


def run(out: Path, workers: int, clients: int, kills: int, every: float) -> dict[str, object]:
    """Kill the master ``kills`` times under load; the report (see the module docstring)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log = out / "executions"
    # 2 s: on a loaded machine a busy master can miss 1 s of Sentinel pings (a false failover).
    group = SentinelGroup(out / "redis", replicas=1, down_after_ms=2000)
    group.start()
    env = {
        **os.environ,
        **group.env(),
        "TOOLQ_APP": "bench.chaos.failover:registry",
        "TOOLQ_MIN_REPLICAS_ACK": "1",
        "TOOLQ_LEASE_SECONDS": "10",
        "TOOLQ_SWEEP_INTERVAL": "0.25",
        "TOOLQ_FAILOVER_LOG": str(log),
        "PYTHONPATH": str(ROOT),
    }
    settings = Settings(**group.settings(), min_replicas_ack=1)  # type: ignore[arg-type]
    procs: list[subprocess.Popen[bytes]] = []
    stop = threading.Event()
    acked: list[str] = []
    refusals: Counter[str] = Counter()
    failovers: list[float] = []
    client = Client(registry, settings)
    seen: dict[str, str] = {}
    threads = [
        threading.Thread(target=_client_loop, args=(n, client, stop, acked, seen, refusals))
        for n in range(clients)
    ]
    runs = [f"client{n}" for n in range(clients)]
    threads.append(
        threading.Thread(target=_reader_loop, args=(client, stop, acked, runs, seen, refusals))
    )
    try:
        with open(out / "workers.log", "ab") as wlog:
            for _ in range(workers):
                argv = [sys.executable, "-m", "toolq", "worker", "--risk", "safe"]
                argv += ["--pool", "threads", "--concurrency", "4", "--loglevel", "warning"]
                procs.append(
                    subprocess.Popen(
                        argv,
                        env=env,
                        cwd=ROOT,
                        stdout=wlog,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        for thread in threads:
            thread.start()
        for _ in range(kills):
            time.sleep(every)
            old = group.master_port()
            killed = time.monotonic()
            group.node_at(old).kill()
            new = group.wait_failover(old)
            failovers.append(round(time.monotonic() - killed, 2))
            group.rejoin(group.node_at(old), new)  # back, as a replica of the new master
            group.wait_replicas(new, 1, timeout=60)
        time.sleep(every)
        stop.set()
        for thread in threads:
            thread.join(60)
        master = group.direct(group.node_at(group.master_port()))
        keys = Keys()
        deadline = time.monotonic() + 90
        while True:
            statuses = [master.hget(keys.call(c), "status") for c in acked]
            pending = [s for s in statuses if s is not None and s.decode() not in FINAL]
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        ran = Counter(line.strip() for line in log.read_text().splitlines() if line.strip())
        outcome = Counter(s.decode() if s else "missing" for s in statuses)
        report: dict[str, object] = {
            "acknowledged": len(acked),
            "kills": kills,
            "failover_seconds": failovers,
            "refused_dispatches": dict(refusals),
            "outcomes": dict(outcome),
            "lost": outcome.get("missing", 0),
            "unfinished": len(pending),
            "duplicates": sum(1 for n in ran.values() if n > 1),
            "phantoms": sum(1 for c in ran if not master.exists(keys.call(c))),
            "final_states_read": len(seen),
            # a final state a reader saw that the final master does not have
            "taken_back": sum(
                1
                for c, status in seen.items()
                if (master.hget(keys.call(c), "status") or b"missing").decode() != status
            ),
            "workers_alive": sum(1 for p in procs if p.poll() is None),
        }
        return report
    finally:
        stop.set()
        client.close()
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        group.stop()


def main() -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--every", type=float, default=4.0, help="seconds of load between kills")
    parser.add_argument("--out", type=Path, default=Path("/tmp/toolq-failover"))
    args = parser.parse_args()
    report = run(args.out, args.workers, args.clients, args.kills, args.every)
    print(json.dumps(report, indent=2))
    bad = [k for k in ("lost", "unfinished", "duplicates", "phantoms", "taken_back") if report[k]]
    return 1 if bad or report["workers_alive"] != args.workers else 0


if __name__ == "__main__":
    sys.exit(main())
