"""What ``/healthz`` and ``toolq check`` report besides "Redis answers": each with a fix.

- ``redis_writes``: Redis answers but refuses writes. Probed with a real write (a ``SET``
  with a short TTL on ``Keys.health_probe``), since a ``PING`` succeeds on a Redis that is
  out of memory (``OOM``), cannot save its snapshot (``MISCONF``) or is a replica
  (``READONLY``), while every dispatch and decision fails.
- ``workers``: a queue the deployment needs (a risk level of its tools, or the levels
  ``toolq check --risk`` names) that no live worker consumes: its calls wait.
- ``worker_lost``: a worker whose heartbeat stopped without a clean stop (SIGKILL, OOM
  kill, host loss), reported for ``LOST_NOTICE_SECONDS`` after its heartbeat lapsed.
  Workers record themselves in ``Keys.workers_seen`` at each heartbeat and remove the
  entry on a warm shutdown; an entry whose heartbeat is gone is a lost worker.
- ``history_lag`` (with a history store): the oldest final call not archived yet is older
  than ``TOOLQ_HISTORY_LAG_ALERT``: no archiver runs, or the history store refuses writes.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

import redis

from toolq.errors import WorkerLostError
from toolq.keys import Keys
from toolq.redis_failures import refusal

LOST_NOTICE_SECONDS = 600.0
"""How long a lost worker is reported after its heartbeat lapsed."""
PROBE_TTL_MS = 10_000
"""Lifetime of the write probe's key."""

WRITE_REFUSALS = {
    "OOM": (
        "redis_oom",
        "Redis is out of memory (maxmemory reached): every dispatch and decision fails",
        "raise maxmemory or free memory (finished runs expire with TOOLQ_RESULT_TTL); "
        "keep maxmemory-policy noeviction",
    ),
    "MISCONF": (
        "redis_misconf",
        "Redis refuses writes because its last snapshot (RDB) failed",
        "fix the snapshot's disk (space, permissions of Redis's dir) and check the Redis "
        "log; writes resume after a successful BGSAVE",
    ),
    "READONLY": (
        "redis_readonly",
        "TOOLQ_REDIS_URL points to a read-only replica",
        "point TOOLQ_REDIS_URL at the master (or use TOOLQ_SENTINELS to follow failovers)",
    ),
    "NOREPLICAS": (
        "redis_noreplicas",
        "Redis refuses writes: fewer replicas than its min-replicas-to-write are connected",
        "bring the replicas back, or lower min-replicas-to-write",
    ),
    "NOPERM": (
        "redis_noperm",
        "the Redis user may not write toolq's keys",
        "give the user write access to ~toolq:* (docs/operations/redis-acls.md)",
    ),
}


@dataclass(frozen=True)
class Check:
    """One check: ``ok``, or a ``code``, the ``reason`` and the ``fix``."""

    name: str
    ok: bool
    code: str = ""
    reason: str = ""
    fix: str = ""

    def as_json(self) -> dict[str, Any]:
        """The check as ``/healthz`` shows it."""
        if self.ok:
            return {"name": self.name, "ok": True}
        return {
            "name": self.name,
            "ok": False,
            "code": self.code,
            "reason": self.reason,
            "fix": self.fix,
        }


def write_check(refused: redis.ResponseError | None, where: str) -> Check:
    """The ``redis_writes`` check from the probe's error (None: the write succeeded)."""
    if refused is None:
        return Check("redis_writes", True)
    text = str(refused).strip()
    code, reason, fix = WRITE_REFUSALS.get(
        refusal_kind(refused),
        ("redis_write_refused", "Redis refuses writes", "read the Redis log for the cause"),
    )
    first = text.splitlines()[0] if text else type(refused).__name__
    return Check("redis_writes", False, code, f"{reason} ({where}: {first})", fix)


NEARLY_FULL_CODE = "redis_nearly_full"
NEARLY_FULL = 0.95
"""Share of ``maxmemory`` past which ``redis_memory`` fails: a dispatch (a larger write) may
be refused there while the probe's small write still passes."""


def memory_check(memory: tuple[int, int] | None, where: str) -> Check:
    """The ``redis_memory`` check from ``(used_memory, maxmemory)`` (None: not readable)."""
    if memory is None or memory[1] <= 0 or memory[0] < NEARLY_FULL * memory[1]:
        return Check("redis_memory", True)
    used, limit = memory
    return Check(
        "redis_memory",
        False,
        NEARLY_FULL_CODE,
        f"Redis at {where} uses {used / limit:.0%} of its maxmemory ({used} of {limit} "
        "bytes): dispatches and decisions may be refused while small writes still pass",
        "free memory or raise maxmemory (runbook: Redis is full or read-only)",
    )


def read_memory(client: redis.Redis) -> tuple[int, int] | None:
    """``(used_memory, maxmemory)`` from one ``INFO memory`` (None: INFO not allowed)."""
    try:
        return _memory(client.info("memory"))
    except redis.ResponseError:  # an ACL user without +info
        return None


def _memory(info: Any) -> tuple[int, int]:
    """``(used_memory, maxmemory)`` of an ``INFO memory`` reply."""
    return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))


def refusal_kind(exc: redis.ResponseError) -> str:
    """Redis's error code of a refused write: ``OOM``, ``MISCONF``, ``READONLY``, ...

    Read by ``toolq.redis_failures.refusal`` (redis-py takes some codes off the message and
    raises a class of its own for them); ``NOPERM`` is an ACL refusal.
    """
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return "NOPERM"
    reason = refusal(exc)
    return _CODES.get(reason, "") if reason is not None else ""


_CODES = {"full": "OOM", "disk": "MISCONF", "read_only": "READONLY", "no_replicas": "NOREPLICAS"}


def queue_checks(workers: list[dict[str, Any]], queues: list[str]) -> list[Check]:
    """A ``workers`` check per queue in ``queues``: whether a live worker consumes it."""
    consumed = {queue for worker in workers for queue in worker.get("queues", [])}
    return [
        Check(f"workers:{queue}", True)
        if queue in consumed
        else Check(
            f"workers:{queue}",
            False,
            "no_worker",
            f"no live worker consumes {queue}: its calls wait in the queue",
            f"start a worker for it: toolq worker --risk {queue.rsplit('.', 1)[-1]} "
            "--app MODULE:ATTR (the module of your tools; --app may be left out where "
            "TOOLQ_APP is set)",
        )
        for queue in queues
    ]


def lost_checks(seen: dict[str, str], alive: set[str], now: float | None = None) -> list[Check]:
    """A ``worker_lost`` check per worker in ``seen`` without a heartbeat, lost recently.

    ``seen`` maps hostnames to their ``Keys.workers_seen`` entries; ``alive`` holds the
    hostnames with a heartbeat now.
    """
    now = time.time() if now is None else now
    found = []
    for hostname, entry in sorted(seen.items()):
        if hostname in alive:
            continue
        lapsed = lapsed_at(entry)
        if lapsed is None or now - lapsed > LOST_NOTICE_SECONDS:
            continue
        data = json.loads(entry)
        queues = ", ".join(data.get("queues", []))
        # From its last heartbeat (what host and supervisor logs are matched against), not
        # from when that heartbeat lapsed, up to three periods later.
        ago = max(0, int(now - float(data["at"])))
        found.append(
            Check(
                WorkerLostError.code,
                False,
                WorkerLostError.code,
                f"worker {hostname} ({queues}) stopped without a clean shutdown: its last "
                f"heartbeat was about {ago}s ago (killed, OOM-killed, hung, exited on an "
                "error, or its host lost)",
                "check its host and supervisor logs (its own log for an error; dmesg for the "
                "OOM killer); its calls are recovered one lease later (runbook: a worker is "
                "killed mid-call)",
            )
        )
    return found


def lapsed_at(entry: str | bytes) -> float | None:
    """When the heartbeat recorded in a ``workers_seen`` entry lapsed (None: unreadable)."""
    try:
        data = json.loads(entry)
        return float(data["at"]) + float(data["ttl"])
    except (ValueError, KeyError, TypeError):
        return None


def seen_entry(info: dict[str, Any], ttl: int, now: float) -> str:
    """The ``workers_seen`` entry a heartbeat writes."""
    return json.dumps({"at": now, "ttl": ttl, "queues": info.get("queues", [])})


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_writes(client: redis.Redis, keys: Keys) -> redis.ResponseError | None:
    """Write the probe key; the error Redis refused it with, or None."""
    try:
        client.set(keys.health_probe, "1", px=PROBE_TTL_MS)
    except redis.ResponseError as exc:  # OOM, MISCONF, READONLY, NOPERM: Redis answered
        return exc
    return None


def history_lag(first: Any, now: float | None = None) -> float:
    """Age (s) of the oldest archive entry (``XRANGE ... COUNT 1``'s reply); 0 with none."""
    if not first:
        return 0.0
    ms = int(_text(first[0][0]).partition("-")[0])
    return max(0.0, (time.time() if now is None else now) - ms / 1000)


def history_check(lag: float, alert: float) -> Check:
    """The ``history_lag`` check: degraded when the archiving lag exceeds ``alert``."""
    if lag <= alert:
        return Check("history_lag", True)
    return Check(
        "history_lag",
        False,
        "history_lag",
        f"the oldest finished call not archived yet is {lag:.0f}s old (alert at {alert:g}s)",
        "run workers (or toolq history archive) with TOOLQ_HISTORY_URL set, and check the "
        "history store accepts writes (toolq history status)",
    )


def run_checks(
    client: redis.Redis,
    keys: Keys,
    queues: list[str],
    where: str,
    history_alert: float | None = None,
) -> list[Check]:
    """Every check, read with ``client`` (connection errors propagate).

    Workers are found through ``Keys.workers_seen`` (every live worker is there), not by
    scanning the keyspace: a load balancer may ask every few seconds. ``history_alert``
    (with a history store): the archiving lag that degrades the health.
    """
    refused = probe_writes(client, keys)
    seen: Any = client.hgetall(keys.workers_seen)
    checks = _checks(refused, seen, client.mget(_beat_keys(keys, seen)) if seen else [],
                     queues, where, read_memory(client))  # fmt: skip
    if history_alert is not None:
        first = client.xrange(keys.history_archive, count=1)
        checks.append(history_check(history_lag(first), history_alert))
    return checks


def _beat_keys(keys: Keys, seen: dict[Any, Any]) -> list[str]:
    return [keys.worker(_text(name)) for name in seen]


def _checks(
    refused: redis.ResponseError | None,
    seen: dict[Any, Any],
    beats: Any,
    queues: list[str],
    where: str,
    memory: tuple[int, int] | None,
) -> list[Check]:
    workers = [json.loads(b) for b in beats if b]
    alive = {str(w.get("hostname")) for w in workers}
    written = write_check(refused, where)
    return [
        written,
        *([memory_check(memory, where)] if written.ok else []),  # refused says more
        *queue_checks(workers, queues),
        *lost_checks({_text(k): _text(v) for k, v in seen.items()}, alive),
    ]


async def run_checks_async(
    client: redis.asyncio.Redis,
    keys: Keys,
    queues: list[str],
    where: str,
    history_alert: float | None = None,
) -> list[Check]:
    """``run_checks`` over an asyncio Redis client."""
    refused: redis.ResponseError | None = None
    try:
        await client.set(keys.health_probe, "1", px=PROBE_TTL_MS)
    except redis.ResponseError as exc:
        refused = exc
    seen: Any = await client.hgetall(keys.workers_seen)
    beats = await client.mget(_beat_keys(keys, seen)) if seen else []
    memory: tuple[int, int] | None = None
    with contextlib.suppress(redis.ResponseError):  # an ACL user without +info: None
        memory = _memory(await client.info("memory"))
    checks = _checks(refused, seen, beats, queues, where, memory)
    if history_alert is not None:
        first = await client.xrange(keys.history_archive, count=1)
        checks.append(history_check(history_lag(first), history_alert))
    return checks
