"""Fixtures of the cell tests: private redis-servers (one per cell), stopped by their PID."""

from __future__ import annotations

import json
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SECRETS_KEY, make_settings
from toolq import Settings
from toolq.cli.stack import EmbeddedRedis


class CellServers:
    """``redis-server``s this test started, each with its own password."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.servers: list[EmbeddedRedis] = []

    def start(self, count: int) -> list[str]:
        for _ in range(count):
            server = EmbeddedRedis(
                password=secrets.token_urlsafe(12),
                directory=str(self.root / f"cell{len(self.servers)}"),
            )
            os.makedirs(server.dir, exist_ok=True)
            server.start()
            self.servers.append(server)
        return self.urls

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def kill9(self, index: int) -> None:
        """SIGKILL the redis-server of cell ``index`` (a process this test started)."""
        process = self.servers[index].process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)

    def settings(self, count: int | None = None, **overrides: object) -> Settings:
        urls = self.urls[: count or len(self.urls)]
        return make_settings(shards=urls, **overrides)

    def env(self, count: int | None = None) -> dict[str, str]:
        urls = self.urls[: count or len(self.urls)]
        return {"TOOLQ_SHARDS": json.dumps(urls), "TOOLQ_SECRETS_KEY": SECRETS_KEY}

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture
def cell_servers(tmp_path: Path) -> Iterator[CellServers]:
    servers = CellServers(tmp_path)
    yield servers
    servers.stop()
