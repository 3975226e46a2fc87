"""What finished calls leave in Redis with a history store, and what they take in SQL.

Runs ``CALLS`` no-op calls on an embedded Redis (in-process worker), archives them to an
SQLite history store with a 1 s hot window, and prints Redis's bytes per finished call
(``MEMORY USAGE`` of every key, ``bench.probes.memory``) before archiving and once the hot
window passed, with the kinds of key left; the archiving rate; then the SQLite file's bytes
per call. ``python -m bench.probes.history_memory [CALLS]``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from bench.probes.memory import key_kinds
from toolq import Client, Settings, ToolRegistry
from toolq.cli.stack import EmbeddedRedis
from toolq.history.archiver import Archiver
from toolq.history.store import HistoryStore
from toolq.keys import Keys
from toolq.testing import TestWorker

registry = ToolRegistry()


@registry.tool()
def noop() -> None:
    """Do nothing."""


def total(client: object) -> tuple[int, list[dict[str, object]]]:
    kinds = key_kinds(client)  # type: ignore[arg-type]
    return sum(int(k["bytes"]) for k in kinds), kinds  # type: ignore[call-overload]


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    server = EmbeddedRedis()
    server.start()
    folder = Path(tempfile.mkdtemp(prefix="toolq-history-bench-"))
    url = f"sqlite:///{folder / 'history.db'}"
    try:
        settings = Settings(redis_url=server.url, history_url=url, hot_seconds=1)
        with Client(registry, settings) as client:
            base, _ = total(client.redis)
            for start in range(0, calls, 500):
                payload = [
                    {"id": f"c{i}", "name": "noop", "arguments": {}}
                    for i in range(start, min(calls, start + 500))
                ]
                client.dispatch(payload, run_id=f"run-{start}")
            with TestWorker(settings, registry) as worker:
                worker.drain()
            before, _ = total(client.redis)
            history = HistoryStore(url)
            archiver = Archiver(client.redis, Keys(), settings, history, "bench")
            started = time.perf_counter()
            archived = 0
            while True:
                done = archiver.step(10)
                archived += done
                if not done:
                    break
            elapsed = time.perf_counter() - started
            time.sleep(1.5)
            cold, kinds = total(client.redis)
            size = sum(p.stat().st_size for p in folder.iterdir())
            history.close()
        print(
            f"calls: {calls}, archived: {archived} in {elapsed:.2f}s "
            f"({archived / elapsed:.0f} calls/s, batches of {settings.history_batch})"
        )
        for label, value in (
            ("finished, not archived", before),
            ("after the hot window", cold),
        ):
            print(f"redis bytes per call, {label}: {(value - base) / calls:,.0f}")
        print("left in Redis after the hot window:")
        for kind in kinds:
            print(
                f"  {kind['key']:<40} {kind['type']:<6} {kind['keys']:>6} keys "
                f"{kind['bytes_per_key']:>8.0f} B each"
            )
        print(f"history store (SQLite, WAL) bytes per call: {size / calls:,.0f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
