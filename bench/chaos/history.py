"""The history: one JSON line per client operation, decision, fault and worker start.

Every process appends to the same file with ``O_APPEND`` and one ``write`` per line, so
lines from concurrent writers never interleave.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from kombu.exceptions import OperationalError

from toolq.errors import RedisUnavailableError

HISTORY = "history.jsonl"
EXECUTIONS = "executions.jsonl"
DUMP = "redis-dump.json"
REPORT = "report.json"


class History:
    """Appends operations to ``DIR/history.jsonl``."""

    def __init__(self, out_dir: Path, actor: str) -> None:
        self.actor = actor
        self._fd = os.open(out_dir / HISTORY, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, op: str, **fields: Any) -> None:
        """Write one operation; ``time`` defaults to now."""
        entry = {"op": op, "actor": self.actor, "time": time.time(), **fields}
        os.write(self._fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Entries of a JSONL file (a torn last line from a killed writer is skipped)."""
    if not path.exists():
        return
    with path.open() as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def error_reason(exc: BaseException) -> str:
    """A short, stable reason for a failed client operation."""
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OperationalError | OSError):
        return "redis_unavailable"
    if isinstance(exc, RedisUnavailableError):  # a cell's (CellUnavailableError) included
        return "redis_unavailable"
    if isinstance(exc, redis.ResponseError) and "LOADING" in str(exc):
        return "redis_loading"
    return type(exc).__name__
