"""History soak: steady agent-shaped load for minutes, with the history archiver on.

    python -m bench.probes.soak --minutes 30 --rate 300 --workers 2 --store postgresql

Starts its own ``redis-server`` and PostgreSQL (``initdb`` in a temporary directory, free
port; ``--store sqlite``: a file instead), ``--workers`` ``toolq worker`` processes with
``TOOLQ_HISTORY_URL`` (each runs an archiver thread) and ``TOOLQ_HOT_SECONDS``, and
``--load-procs`` load processes. Each load process runs conversations as threads: a
conversation is one run of ``--turns`` turns, turn k dispatches ``k % 3 + 1`` no-op calls and
waits for them, then the next turn starts on the conversation's schedule (the offered rate
``--rate`` calls/s over all conversations; a conversation behind schedule goes at once);
then a new conversation (a new run) begins.

Every 10 s one line: Redis ``used_memory``, calls done, the archive lag (``lag_seconds``:
age of the oldest final call not yet in SQL), the archive stream's length, and the resident
memory of the worker processes (with their pool children) and of the load processes. The lag is also
sampled every second for its percentiles. At the end, after a final drain of the archive
stream: ``used_memory`` at 2 minutes vs at the end (target at most 1.2x), lag p50/p99
(target p99 at most 5 s), and the history store against the ids the load dispatched:
missing, duplicates (rows per call id above 1), statuses other than ``succeeded``.
``--json PATH`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from bench.figures import percentile
from bench.probes.memory import key_kinds
from bench.procs import Procs, exit_on_signal, worker_env
from toolq.keys import HISTORY_GROUP, Keys

SAMPLE_EVERY = 10.0
"""Seconds between printed samples."""
LAG_EVERY = 1.0
"""Seconds between lag samples (for the percentiles)."""
BASELINE_AT = 120.0
"""Seconds into the load of the ``used_memory`` the end is compared with."""


def run_load(
    index: int,
    url: str,
    conversations: int,
    turns: int,
    period: float,
    until: float,
    done: Any,
    errors: Any,
    out: str,
    history_url: str = "",
) -> None:
    """One load process: ``conversations`` threads until ``until``; call ids go to ``out``.

    The clients have the history store too, as a deployment's dispatching processes do: a
    dispatch into a run asks it for idempotency keys that left Redis (one query each).
    """
    from bench.peers.apps import registry
    from toolq import Client, Settings

    client = Client(registry, Settings(redis_url=url, history_url=history_url))
    ids: list[str] = []
    lock = threading.Lock()

    def conversation(slot: int) -> None:
        # Spread the first turns over one period so the offered rate is flat from the start.
        next_at = time.time() + period * slot / conversations
        while time.time() < until:
            run_id = uuid.uuid4().hex
            for turn in range(turns):
                now = time.time()
                if now >= until:
                    return
                if next_at > now:
                    time.sleep(next_at - now)
                next_at = max(next_at + period, time.time() - period)
                payload = [
                    {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}}
                    for _ in range(turn % 3 + 1)
                ]
                try:
                    batch = client.dispatch(payload, run_id=run_id)
                    with lock:
                        ids.extend(batch.call_ids)
                    results = batch.wait(timeout=120)
                    ok = sum(r.status.value == "succeeded" for r in results)
                    with done.get_lock():
                        done.value += ok
                    if ok != len(payload):
                        with errors.get_lock():
                            errors.value += len(payload) - ok
                except Exception as exc:
                    print(f"load {index}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    with errors.get_lock():
                        errors.value += len(payload)

    threads = [threading.Thread(target=conversation, args=(s,)) for s in range(conversations)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    Path(out).write_text("\n".join(ids))
    client.close()


def tree_rss(pid: int) -> int:
    """Resident memory (bytes) of ``pid`` and its descendants (0 once it is gone)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += next(
                int(line.split()[1]) * 1024
                for line in status.splitlines()
                if line.startswith("VmRSS:")
            )
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total


def start_store(kind: str, folder: Path) -> tuple[str, Any]:
    """The history store's URL, migrated, and the PostgreSQL server (``None`` for SQLite)."""
    from toolq.history.store import HistoryStore

    if kind == "sqlite":
        url = f"sqlite:///{folder / 'history.db'}"
        HistoryStore(url).close()
        return url, None
    from bench.chaos.postgres import PrivatePostgres

    server = PrivatePostgres()
    server.start()
    url = server.create()
    HistoryStore(url, upgrade=True).close()
    return url, server


def archive_backlog(conn: redis.Redis, keys: Keys) -> tuple[int, int]:
    """Entries in the archive stream, and those of them pending in the group."""
    length = int(conn.xlen(keys.history_archive))
    try:
        pending = int(conn.xpending(keys.history_archive, HISTORY_GROUP)["pending"])
    except redis.ResponseError:
        pending = 0
    return length, pending


def history_counts(url: str, dispatched: set[str]) -> dict[str, int]:
    """Rows per call id in SQL against the dispatched ids."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT call_id, status, COUNT(*) FROM history_calls GROUP BY call_id, status")
            ).all()
            total = conn.execute(text("SELECT COUNT(*) FROM history_calls")).scalar_one()
    finally:
        engine.dispose()
    per_id: dict[str, int] = {}
    not_ok = 0
    for call_id, status, n in rows:
        per_id[call_id] = per_id.get(call_id, 0) + int(n)
        not_ok += int(n) if status != "succeeded" else 0
    return {
        "dispatched": len(dispatched),
        "rows": int(total),
        "distinct": len(per_id),
        "missing": len(dispatched - per_id.keys()),
        "duplicates": sum(n - 1 for n in per_id.values() if n > 1),
        "unknown": len(per_id.keys() - dispatched),
        "not_succeeded": not_ok,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.probes.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--rate", type=float, default=300.0, help="offered calls/s, all conversations")
    p.add_argument("--conversations", type=int, default=128, help="over all load processes")
    p.add_argument("--turns", type=int, default=10, help="turns per conversation (one run)")
    p.add_argument("--load-procs", type=int, default=2)
    p.add_argument("--workers", type=int, default=2, help="toolq worker processes")
    p.add_argument("--pool", default="threads")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--hot-seconds", type=int, default=60)
    p.add_argument("--store", choices=("postgresql", "sqlite"), default="postgresql")
    p.add_argument("--drain", type=float, default=180.0, help="seconds the final drain may take")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, exit_on_signal)

    from toolq.cli.stack import EmbeddedRedis
    from toolq.history.archiver import lag_seconds

    folder = Path(tempfile.mkdtemp(prefix="toolq-soak-"))
    (folder / "redis").mkdir()
    server = EmbeddedRedis(directory=str(folder / "redis"))
    server.start()
    procs = Procs()
    pg = None
    loads: list[Any] = []
    keys = Keys()
    conn = redis.Redis.from_url(server.url)
    try:
        url, pg = start_store(a.store, folder)
        env = {
            **worker_env(server.url),
            "TOOLQ_HISTORY_URL": url,
            "TOOLQ_HOT_SECONDS": str(a.hot_seconds),
        }
        workers = [
            procs.start(
                [
                    sys.executable,
                    "-m",
                    "toolq",
                    "worker",
                    "--app",
                    "bench.peers.apps:registry",
                    "--risk",
                    "safe",
                    "--pool",
                    a.pool,
                    "--concurrency",
                    str(a.concurrency),
                    "--loglevel",
                    "warning",
                ],
                env,
                folder / f"worker-{i}.log",
            )
            for i in range(a.workers)
        ]
        from toolq.cli.check import missing_queues
        from toolq.models import RiskLevel
        from toolq.settings import Settings

        deadline = time.monotonic() + 60
        while missing_queues(Settings(redis_url=server.url), [RiskLevel.SAFE]):
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise SystemExit(f"workers did not come up; logs in {folder}")
            time.sleep(0.2)
        ctx = multiprocessing.get_context("spawn")
        done = ctx.Value("q", 0)
        errors = ctx.Value("q", 0)
        per_proc = max(1, a.conversations // a.load_procs)
        # Each conversation runs one turn per period; turns average 2 calls.
        period = a.load_procs * per_proc * 2 / a.rate
        start = time.time()
        until = start + a.minutes * 60
        for i in range(a.load_procs):
            proc = ctx.Process(
                target=run_load,
                args=(
                    i,
                    server.url,
                    per_proc,
                    a.turns,
                    period,
                    until,
                    done,
                    errors,
                    str(folder / f"ids-{i}.txt"),
                    url,
                ),
            )
            proc.start()
            loads.append(proc)
        print(
            f"soak: {a.minutes:g} min, offered {a.rate:g} calls/s, {per_proc * a.load_procs} "
            f"conversations x {a.turns} turns, {a.workers} workers ({a.pool} x "
            f"{a.concurrency}), hot {a.hot_seconds}s, store {a.store}, dir {folder}",
            flush=True,
        )
        print(
            f"{'t_s':>6} {'used_memory':>12} {'calls_done':>10} {'calls/s':>8} "
            f"{'lag_s':>6} {'backlog':>8} {'errors':>6} {'workers_MiB':>11} {'load_MiB':>8}",
            flush=True,
        )
        lags: list[float] = []
        kept: dict[str, list[dict[str, Any]]] = {}
        samples: list[dict[str, float]] = []
        last_done, last_t = 0, start
        next_sample = start + SAMPLE_EVERY
        while time.time() < until:
            time.sleep(LAG_EVERY)
            now = time.time()
            lags.append(lag_seconds(conn, keys, now))
            if now >= next_sample:
                next_sample += SAMPLE_EVERY
                mem = int(conn.info("memory")["used_memory"])
                workers_rss = sum(tree_rss(w.pid) for w in workers)
                load_rss = sum(tree_rss(p.pid) for p in loads if p.pid is not None)
                backlog, _ = archive_backlog(conn, keys)
                calls = int(done.value)
                rate = (calls - last_done) / (now - last_t)
                last_done, last_t = calls, now
                samples.append(
                    {
                        "t": now - start,
                        "used_memory": mem,
                        "done": calls,
                        "lag": lags[-1],
                        "backlog": backlog,
                        "workers_rss": workers_rss,
                        "load_rss": load_rss,
                    }
                )
                if now - start >= BASELINE_AT and "kinds_2min" not in kept:
                    kept["kinds_2min"] = key_kinds(conn)
                print(
                    f"{now - start:6.0f} {mem:12,d} {calls:10,d} {rate:8.1f} "
                    f"{lags[-1]:6.2f} {backlog:8,d} {int(errors.value):6d} "
                    f"{workers_rss / 2**20:11.1f} {load_rss / 2**20:8.1f}",
                    flush=True,
                )
        kinds_end = key_kinds(conn)
        for proc in loads:
            proc.join(180)
        offered_end = time.time()
        # Final drain: every final call leaves the archive stream once it is in SQL.
        drain_start = time.monotonic()
        while time.monotonic() - drain_start < a.drain:
            length, pending = archive_backlog(conn, keys)
            if length == 0 and pending == 0:
                break
            time.sleep(0.5)
        drained_in = time.monotonic() - drain_start
        length, pending = archive_backlog(conn, keys)
        dispatched: set[str] = set()
        for i in range(a.load_procs):
            path = folder / f"ids-{i}.txt"
            if path.exists():
                dispatched |= {line for line in path.read_text().splitlines() if line}
        counts = history_counts(url, dispatched)
        base = next((s for s in samples if s["t"] >= BASELINE_AT), samples[0] if samples else None)
        end_mem = int(conn.info("memory")["used_memory"])
        result = {
            "command": " ".join(["python -m bench.probes.soak", *(argv or sys.argv[1:])]),
            "minutes": a.minutes,
            "offered_rate": a.rate,
            "calls_done": int(done.value),
            "errors": int(errors.value),
            "achieved_rate": int(done.value) / (offered_end - start),
            "used_memory_2min": int(base["used_memory"]) if base else None,
            "used_memory_end": samples[-1]["used_memory"] if samples else end_mem,
            "used_memory_after_drain": end_mem,
            "lag_p50_s": percentile(lags, 50),
            "lag_p99_s": percentile(lags, 99),
            "lag_max_s": max(lags) if lags else 0.0,
            "drain_s": drained_in,
            "left_in_archive_stream": length,
            "left_pending": pending,
            "history": counts,
            "samples": samples,
        }
        ratio = (
            result["used_memory_end"] / result["used_memory_2min"]
            if result["used_memory_2min"]
            else float("nan")
        )
        result["memory_ratio"] = ratio
        h = counts
        if base and samples:
            print(
                f"processes' resident memory at {base['t']:.0f}s -> end: workers "
                f"{base['workers_rss'] / 2**20:.1f} -> {samples[-1]['workers_rss'] / 2**20:.1f} "
                f"MiB, load {base['load_rss'] / 2**20:.1f} -> "
                f"{samples[-1]['load_rss'] / 2**20:.1f} MiB"
            )
        print(
            f"calls done: {result['calls_done']:,} ({result['achieved_rate']:.1f}/s over the "
            f"load, offered {a.rate:g}/s), errors: {result['errors']}"
        )
        print(
            f"used_memory at {BASELINE_AT:.0f}s: {result['used_memory_2min']:,}, at the end: "
            f"{result['used_memory_end']:,}, ratio {ratio:.2f}x (target <= 1.2x) "
            f"{'MET' if ratio <= 1.2 else 'NOT MET'}"
        )
        print(
            f"archive lag p50 {result['lag_p50_s']:.2f}s p99 {result['lag_p99_s']:.2f}s max "
            f"{result['lag_max_s']:.2f}s (target p99 <= 5s) "
            f"{'MET' if result['lag_p99_s'] <= 5 else 'NOT MET'}"
        )
        print(
            f"final drain: {drained_in:.1f}s, left in the archive stream {length}, "
            f"pending {pending}"
        )
        print(
            f"history: dispatched {h['dispatched']:,}, rows {h['rows']:,}, missing "
            f"{h['missing']}, duplicates {h['duplicates']}, unknown {h['unknown']}, not "
            f"succeeded {h['not_succeeded']}"
        )
        before = {(k["key"], k["type"]): k for k in kept.get("kinds_2min", [])}
        print(
            f"{'redis keys by kind':<44} {'keys@2min':>9} {'bytes@2min':>12} {'keys@end':>9} "
            f"{'bytes@end':>12}"
        )
        for kind in kinds_end[:15]:
            old = before.get((kind["key"], kind["type"]), {"keys": 0, "bytes": 0})
            print(
                f"  {kind['key'][:36]:<36} {kind['type']:<6} {old['keys']:>9,} "
                f"{old['bytes']:>12,} {kind['keys']:>9,} {kind['bytes']:>12,}"
            )
        result["key_kinds_2min"] = kept.get("kinds_2min", [])
        result["key_kinds_end"] = kinds_end
        if a.json:
            a.json.write_text(json.dumps(result, indent=2))
        ok = h["missing"] == 0 and h["duplicates"] == 0 and h["unknown"] == 0
        return 0 if ok else 1
    finally:
        for proc in loads:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        procs.stop_all()
        conn.close()
        if pg is not None:
            pg.remove()
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
