"""Tools the chaos workers load (``--app bench.chaos.app:registry``).

Every handler records its execution twice: ``RPUSH chaos:exec:<call_id>`` in Redis and one
line in the local file named by ``CHAOS_EXEC_LOG``. A start entry is written before any
work and an end entry after it, both with the same execution id, pid and process group.
The file copy survives a Redis outage that outlasts the client's retries; the checker
merges both sources by execution id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from toolq import RiskLevel, ToolContext, ToolRegistry
from toolq.results.connection import redis_client

EXEC_PREFIX = "chaos:exec:"
"""Redis list of one call's execution entries (``EXEC_PREFIX + call_id``)."""

log = logging.getLogger("bench.chaos.app")
registry = ToolRegistry()


class _Recorder:
    """Per-process Redis client and log file (prefork children get their own after fork)."""

    def __init__(self) -> None:
        self._pid = 0
        self._lock = threading.Lock()
        self._redis: redis.Redis | None = None
        self._fd = -1

    def _ensure(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._redis = redis_client(os.environ["TOOLQ_REDIS_URL"])
            path = os.environ.get("CHAOS_EXEC_LOG")
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else -1
            self._pid = os.getpid()

    def write(self, entry: dict[str, Any]) -> None:
        self._ensure()
        line = json.dumps(entry, separators=(",", ":"))
        if self._fd >= 0:
            os.write(self._fd, (line + "\n").encode())  # one write: atomic with O_APPEND
        try:
            assert self._redis is not None
            self._redis.rpush(EXEC_PREFIX + entry["call_id"], line)
        except redis.RedisError as exc:  # the file copy stands in; never fail the tool
            log.warning("execution record of %s not in Redis: %s", entry["call_id"], exc)


_recorder = _Recorder()


@contextmanager
def recorded(ctx: ToolContext, tool: str) -> Iterator[None]:
    """Record the start and the end of one execution of ``ctx.call_id``."""
    base = {
        "exec": uuid.uuid4().hex,
        "call_id": ctx.call_id,
        "tool": tool,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
    }
    _recorder.write({**base, "ev": "start", "t": time.time()})
    outcome = "error"
    try:
        yield
        outcome = "cancelled" if ctx.cancelled else "ok"
    finally:
        _recorder.write({**base, "ev": "end", "t": time.time(), "outcome": outcome})


# -- safe: fast ---------------------------------------------------------------------------------


@registry.tool()
def fast_echo(text: str, ctx: ToolContext) -> dict[str, str]:
    """Echo the text (not idempotent: a second run would be a duplicate)."""
    with recorded(ctx, "fast_echo"):
        return {"text": text}


@registry.tool(idempotent=True)
def fast_lookup(key: str, ctx: ToolContext) -> dict[str, str]:
    """Look a key up (idempotent: may be re-run after its worker dies)."""
    with recorded(ctx, "fast_lookup"):
        return {"key": key, "value": key[::-1]}


@registry.tool(concurrency=2, rate_limit="10/s")
def throttled_work(ms: int, ctx: ToolContext) -> str:
    """Work for ``ms`` milliseconds under fleet-wide limits: 2 at once, 10 starts a second."""
    with recorded(ctx, "throttled_work"):
        ctx.wait_cancelled(ms / 1000)
        return "worked"


THROTTLED_TOOL = "throttled_work"
THROTTLED_CAP = 2
"""``throttled_work``'s concurrency cap, which the checker reports the peak against."""


# -- moderate: sleep a little -----------------------------------------------------------------


@registry.tool(risk=RiskLevel.MODERATE)
def moderate_work(ms: int, ctx: ToolContext) -> str:
    """Work for ``ms`` milliseconds (not idempotent)."""
    with recorded(ctx, "moderate_work"):
        ctx.wait_cancelled(ms / 1000)
        return "worked"


@registry.tool(risk=RiskLevel.MODERATE, idempotent=True)
def moderate_idempotent(ms: int, ctx: ToolContext) -> str:
    """Work for ``ms`` milliseconds (idempotent)."""
    with recorded(ctx, "moderate_idempotent"):
        ctx.wait_cancelled(ms / 1000)
        return "worked"


@registry.tool(risk=RiskLevel.MODERATE)
async def stream_chunks(n: int, ctx: ToolContext) -> AsyncIterator[Any]:
    """Stream ``n`` progress chunks, 50 ms apart, then the total (async generator)."""
    with recorded(ctx, "stream_chunks"):
        for i in range(n):
            await asyncio.sleep(0.05)
            yield {"chunk": i}
        yield {"chunks": n}


# -- dangerous: approval-gated ------------------------------------------------------------------


@registry.tool(risk=RiskLevel.DANGEROUS)
def dangerous_op(target: str, ms: int, ctx: ToolContext) -> str:
    """Change a target (needs approval; not idempotent)."""
    with recorded(ctx, "dangerous_op"):
        ctx.wait_cancelled(ms / 1000)
        return f"changed {target}"


IDEMPOTENT_TOOLS = frozenset({"fast_lookup", "moderate_idempotent"})
GATED_TOOLS = frozenset({"dangerous_op"})
