"""The history store of a chaos run (``--history``): started, drained, dumped for the checker.

SQLite: a file in the run's directory. PostgreSQL: a private cluster (``PrivatePostgres``)
the ``sql-restart`` fault stops and starts again. Workers get ``TOOLQ_HISTORY_URL`` (each runs
an archiver), a hot window longer than the run (the checker compares the Redis dump with
SQL, so nothing may expire before the dump) and a short ``history_claim_after`` (a killed
archiver's batch is taken over within the run).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench.chaos.postgres import PrivatePostgres
from toolq.keys import HISTORY_GROUP, Keys

HISTORY_DUMP = "history-dump.json"
CLAIM_AFTER = 3.0
"""Seconds before another archiver takes over a killed archiver's batch."""


class HistoryStoreRun:
    """One run's history store."""

    def __init__(self, kind: str, out: Path) -> None:
        self.kind = kind
        self.out = out
        self.postgres: PrivatePostgres | None = None
        self.url = ""

    def start(self) -> None:
        """Create the store and its tables."""
        from toolq.history.store import HistoryStore

        if self.kind == "sqlite":
            self.url = f"sqlite:///{self.out / 'history.db'}"
        else:
            self.postgres = PrivatePostgres()
            self.postgres.start()
            self.url = self.postgres.create()
        HistoryStore(self.url, upgrade=True).close()

    def env(self) -> dict[str, str]:
        """What the workers and archivers need."""
        return {
            "TOOLQ_HISTORY_URL": self.url,
            "TOOLQ_HOT_SECONDS": "3600",
            "TOOLQ_HISTORY_CLAIM_AFTER": str(CLAIM_AFTER),
        }

    def drain(self, redis_url: str, timeout: float, tick: Callable[[], None]) -> dict[str, Any]:
        """Wait until the archive stream is empty (every final call in SQL); what is left."""
        keys = Keys()
        conn = redis.Redis.from_url(redis_url, socket_timeout=5)
        start = time.monotonic()
        length = pending = -1
        try:
            while time.monotonic() - start < timeout:
                try:
                    length = int(conn.xlen(keys.history_archive))
                    summary: Any = conn.xpending(keys.history_archive, HISTORY_GROUP)
                    pending = int(summary["pending"])
                except redis.RedisError:
                    length = pending = -1
                if length == 0 and pending == 0:
                    break
                tick()
                time.sleep(0.5)
        finally:
            conn.close()
        return {"left": length, "pending": pending, "waited_s": round(time.monotonic() - start, 2)}

    def dump(self) -> None:
        """Rows per call id (with their statuses) and events per call, to ``HISTORY_DUMP``."""
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url)
        calls: dict[str, dict[str, Any]] = {}
        events: dict[str, int] = {}
        try:
            with engine.connect() as conn:
                for call_id, status, rows in conn.execute(
                    text(
                        "SELECT call_id, status, COUNT(*) FROM history_calls"
                        " GROUP BY call_id, status"
                    )
                ):
                    entry = calls.setdefault(call_id, {"statuses": [], "rows": 0})
                    entry["statuses"].append(status)
                    entry["rows"] += int(rows)
                for call_id, n in conn.execute(
                    text("SELECT call_id, COUNT(*) FROM history_events GROUP BY call_id")
                ):
                    events[call_id] = int(n)
        finally:
            engine.dispose()
        (self.out / HISTORY_DUMP).write_text(
            json.dumps({"store": self.kind, "calls": calls, "events": events})
        )

    def stop(self) -> None:
        """Stop and delete a PostgreSQL cluster (an SQLite file stays with the run)."""
        if self.postgres is not None:
            self.postgres.remove()
