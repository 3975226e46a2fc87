"""Run toolq under load and faults on one machine, then check the history.

    python -m bench.chaos.harness --clients 4 --calls 40 --duration 45 --workers 4 \\
        --fault-interval 4 --seed 1 --out /tmp/chaos   # every fault kind by default

Starts a private Redis (AOF, ``appendfsync always`` by default), the workers, the
auto-approver and the client processes; injects one fault every ``--fault-interval``
seconds during ``--duration``; waits for the clients and for every call to settle; dumps
Redis; runs the checker. Exit status: the checker's (non-zero when an invariant fails).

``--cells 2``: two cells (``TOOLQ_SHARDS``): a private Redis each, ``--workers`` worker
processes per cell (``toolq worker`` with ``TOOLQ_SHARD``), clients and approver over both,
and a fault injector per cell (faults in both, each on its own seeded schedule). The dumps
of the cells are merged for the checker; ``cells.json`` says how many runs and calls each held.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos import checker
from bench.chaos.dump import dump_redis, unfinished
from bench.chaos.faults import (
    ALL_FAULT_KINDS,
    FAULT_KINDS,
    HISTORY_FAULT_KINDS,
    FaultInjector,
    WorkerPool,
    WorkerSpec,
    worker_specs,
)
from bench.chaos.history import DUMP, History
from bench.chaos.history_store import HistoryStoreRun
from bench.chaos.load import TENANTS, LoadConfig, run_approver, run_client
from bench.chaos.server import PrivateRedis
from bench.procs import exit_on_signal
from toolq.cli.check import missing_queues
from toolq.cli.keys import fresh_keys
from toolq.models import RiskLevel
from toolq.settings import Settings


@dataclass
class ChaosConfig:
    """One harness run."""

    out: Path
    clients: int = 4
    calls: int = 40
    inflight: int = 2
    tenants: int = 3
    duration: float = 45.0
    workers: int = 4
    fault_interval: float = 4.0
    faults: list[str] = field(default_factory=lambda: list(FAULT_KINDS))
    seed: int = 1
    appendfsync: str = "always"
    lease_seconds: float = 5.0
    redis_outage: float = 1.0
    wait_timeout: float = 90.0
    drain: float = 60.0
    cells: int = 1
    history: str = "none"
    archivers: int = 1


def run(cfg: ChaosConfig) -> int:
    """Run the load and the faults, dump Redis, check; returns the checker's exit status."""
    if cfg.out.exists():
        shutil.rmtree(cfg.out)
    cfg.out.mkdir(parents=True)
    history = History(cfg.out, "harness")
    one = cfg.cells == 1
    servers = [
        PrivateRedis(cfg.out / ("redis" if one else f"redis-{i}"), cfg.appendfsync)
        for i in range(cfg.cells)
    ]
    for server in servers:
        server.start()
    urls = [server.url for server in servers]
    shards = {} if one else {"TOOLQ_SHARDS": json.dumps(urls)}
    # Production-like trust: workers verify signed approvals and open sealed secrets; only
    # the approver process holds the signing key.
    keys = fresh_keys()
    worker_env = {
        "TOOLQ_APPROVAL_VERIFY_KEYS": keys["TOOLQ_APPROVAL_VERIFY_KEYS"],
        "TOOLQ_SECRETS_KEY": keys["TOOLQ_SECRETS_KEY"],
        "TOOLQ_LEASE_SECONDS": str(cfg.lease_seconds),
        "TOOLQ_SWEEP_INTERVAL": "0.25",
        "TOOLQ_HEARTBEAT_SECONDS": "0.5",
        **shards,
    }
    if cfg.tenants > 1:
        worker_env["TOOLQ_TENANTS"] = json.dumps(TENANTS)
    store = HistoryStoreRun(cfg.history, cfg.out) if cfg.history != "none" else None
    if store is not None:
        if not one:
            raise SystemExit("--history with --cells is not supported")
        store.start()
        worker_env.update(store.env())
    pools = [
        WorkerPool(
            _cell_specs(cfg.workers, None if one else i),
            server.url,
            cfg.out,
            worker_env if one else {**worker_env, "TOOLQ_SHARD": str(i)},
        )
        for i, server in enumerate(servers)
    ]
    ctx = multiprocessing.get_context("spawn")
    stop_approver = ctx.Event()
    approver = None
    injectors: list[FaultInjector] = []
    clients: list[multiprocessing.process.BaseProcess] = []
    started = time.time()
    try:
        for pool in pools:
            pool.start_all()
            for i in range(cfg.archivers if store is not None else 0):
                pool.start_archiver(f"a{i}")
        for pool in pools:
            _wait_ready(pool.redis_url, pool)
        load = LoadConfig(
            redis_url=urls[0],
            out_dir=cfg.out,
            calls=cfg.calls,
            duration=cfg.duration,
            seed=cfg.seed,
            start_at=time.time() + 2.0,
            wait_timeout=cfg.wait_timeout,
            inflight=cfg.inflight,
            tenants=cfg.tenants,
            keys=keys,
            shards=() if one else tuple(urls),
        )
        history.append(
            "start",
            config={**vars(cfg), "out": str(cfg.out)},
            redis_url=urls[0],
            cells=len(urls),
            load_start=load.start_at,
        )
        approver = ctx.Process(target=run_approver, args=(load, stop_approver), name="approver")
        approver.start()
        clients = [
            ctx.Process(target=run_client, args=(i, load), name=f"client-{i}")
            for i in range(cfg.clients)
        ]
        for proc in clients:
            proc.start()
        time.sleep(max(0.0, load.start_at - time.time()))
        injectors = [
            FaultInjector(
                pool,
                server,
                cfg.faults,
                interval=cfg.fault_interval,
                duration=cfg.duration,
                seed=cfg.seed if one else int(f"{cfg.seed}{i}"),
                redis_outage=cfg.redis_outage,
                sql=store.postgres if store is not None else None,
            )
            for i, (pool, server) in enumerate(zip(pools, servers, strict=True))
        ]
        for injector in injectors:
            injector.start()
        for injector in injectors:
            injector.join()
        history.append("faults_over")
        limit = time.monotonic() + cfg.duration + cfg.wait_timeout + 60
        for proc in clients:
            proc.join(max(1.0, limit - time.monotonic()))
            if proc.is_alive():
                history.append("client_stuck", client=proc.name)
                proc.terminate()
                proc.join(5)
        history.append("clients_done")
        # Let every accepted call settle (or not: what is left is what the checker calls lost).
        drain_end = time.monotonic() + cfg.drain
        while sum(unfinished(url) for url in urls) and time.monotonic() < drain_end:
            for pool in pools:
                pool.check_alive()
            time.sleep(0.5)
        history.append("drained", unfinished=sum(unfinished(url) for url in urls))
        if store is not None:
            # Every final call leaves the archive stream once it is in SQL: wait for that.
            left = store.drain(urls[0], cfg.drain, pools[0].check_alive)
            history.append("history_drained", **left)
        if one:
            dump_redis(urls[0], cfg.out / DUMP)
        else:
            _dump_cells(urls, cfg.out)
        if store is not None:
            store.dump()
    finally:
        for injector in injectors:  # no worker restart may race the pool's stop below
            injector.stopped.set()
            injector.join(30)
        for proc in clients:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        stop_approver.set()
        if approver is not None:
            approver.join(10)
            if approver.is_alive():
                approver.terminate()
        for pool in pools:
            pool.stop_all()
        for server in servers:
            server.stop()
        if store is not None:
            store.stop()
        history.append("stop", elapsed=time.time() - started)
        history.close()
    report = checker.check(cfg.out)
    print(checker.render(report))
    if not one:
        print(f"cells: {(cfg.out / CELLS).read_text()}")
    return 0 if report["ok"] else 1


CELLS = "cells.json"
"""Two-cell mode: runs and calls each cell held, and runs found in more than one cell."""


def _cell_specs(count: int, cell: int | None) -> list[WorkerSpec]:
    specs = worker_specs(count)
    if cell is None:
        return specs
    return [
        WorkerSpec(f"c{cell}-{s.name}", s.risk, s.pool, s.concurrency, s.prefetch) for s in specs
    ]


def _dump_cells(urls: list[str], out: Path) -> None:
    """Dump every cell and merge the dumps into the one the checker reads."""
    merged: dict[str, Any] = {}
    per_cell = []
    runs_seen: dict[str, set[int]] = {}
    for index, url in enumerate(urls):
        data = dump_redis(url, out / f"redis-dump-{index}.json")
        runs = {c["run_id"] for c in data["calls"].values() if c.get("run_id")}
        for run in runs:
            runs_seen.setdefault(run, set()).add(index)
        per_cell.append({"cell": index, "runs": len(runs), "calls": len(data["calls"])})
        if not merged:
            merged = data
            continue
        for name in ("calls", "executions", "events"):
            merged[name].update(data[name])
        merged["audit"] += data["audit"]
        merged["unacked"] += data["unacked"]
        leftovers = merged["leftovers"]
        for name, value in data["leftovers"].items():
            if isinstance(value, dict):
                for key, n in value.items():
                    leftovers[name][key] = leftovers[name].get(key, 0) + n
            else:
                leftovers[name] += value
    (out / DUMP).write_text(json.dumps(merged))
    split = sorted(run for run, cells in runs_seen.items() if len(cells) > 1)
    (out / CELLS).write_text(json.dumps({"cells": per_cell, "runs_in_two_cells": split}))


def _wait_ready(url: str, pool: WorkerPool, timeout: float = 60) -> None:
    settings = Settings(redis_url=url)
    deadline = time.monotonic() + timeout
    while missing_queues(settings, list(RiskLevel)) or any(
        p.poll() is not None for p in pool.procs.values()
    ):
        if time.monotonic() > deadline:
            raise RuntimeError("workers did not come up; see the logs in OUT/workers/")
        time.sleep(0.2)


def parse_args(argv: list[str] | None = None) -> ChaosConfig:
    """The command line as a ``ChaosConfig``."""
    p = argparse.ArgumentParser(
        prog="python -m bench.chaos.harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--clients", type=int, default=4, help="client processes")
    p.add_argument("--calls", type=int, default=40, help="calls per client")
    p.add_argument("--inflight", type=int, default=2, help="dispatches each client keeps in flight")
    p.add_argument(
        "--tenants", type=int, default=3, help="client i dispatches for tenant i %% tenants"
    )
    p.add_argument("--duration", type=float, default=45.0, help="seconds of load and faults")
    p.add_argument("--workers", type=int, default=4, help="toolq worker processes")
    p.add_argument("--fault-interval", type=float, default=4.0, help="seconds between faults")
    p.add_argument(
        "--faults",
        default=None,
        help=f"comma-separated, of: {', '.join(ALL_FAULT_KINDS)} (empty: none; default: "
        f"{', '.join(FAULT_KINDS)}, and with --history also {', '.join(HISTORY_FAULT_KINDS)})",
    )
    p.add_argument(
        "--history",
        choices=("none", "sqlite", "postgresql"),
        default="none",
        help="start a history store (PostgreSQL: a private cluster) and archive into it",
    )
    p.add_argument(
        "--archivers",
        type=int,
        default=1,
        help="with --history: standalone `toolq history archive` processes beside the workers'",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cells", type=int, default=1, help="Redis cells (TOOLQ_SHARDS); 1: none")
    p.add_argument("--out", type=Path, default=Path("/tmp/toolq-chaos"))
    p.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="always")
    p.add_argument("--lease-seconds", type=float, default=5.0)
    p.add_argument(
        "--redis-outage", type=float, default=1.0, help="seconds Redis stays down per restart"
    )
    p.add_argument(
        "--wait-timeout",
        type=float,
        default=90.0,
        help="how long a client waits for one dispatch's calls",
    )
    p.add_argument(
        "--drain",
        type=float,
        default=60.0,
        help="after the clients: how long calls may take to settle",
    )
    a = p.parse_args(argv)
    default = FAULT_KINDS + (HISTORY_FAULT_KINDS if a.history != "none" else ())
    faults = ",".join(default) if a.faults is None else a.faults
    kinds = [k.strip() for k in faults.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(ALL_FAULT_KINDS))
    if unknown:
        p.error(f"unknown faults: {', '.join(unknown)}")
    return ChaosConfig(
        out=a.out,
        clients=a.clients,
        calls=a.calls,
        inflight=a.inflight,
        tenants=a.tenants,
        duration=a.duration,
        workers=a.workers,
        fault_interval=a.fault_interval,
        faults=kinds,
        seed=a.seed,
        appendfsync=a.appendfsync,
        lease_seconds=a.lease_seconds,
        redis_outage=a.redis_outage,
        wait_timeout=a.wait_timeout,
        drain=a.drain,
        cells=a.cells,
        history=a.history,
        archivers=a.archivers,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; SIGTERM/SIGINT end the run with its workers, clients and Redis stopped."""
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, exit_on_signal)
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
