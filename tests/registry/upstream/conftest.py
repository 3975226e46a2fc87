"""Upstream MCP servers for the gateway tests: ``server.py`` beside this file, started for real.

stdio servers are started by the toolset under test (each process its own); an HTTP server
is started here, on a free port, and stopped by its process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_listening
from toolq.cli.stack import _free_port

SERVER = str(Path(__file__).with_name("server.py"))
TOKENS = {"tok-lister-5b1d": "lister", "tok-acme-9f3e7c": "acme", "tok-globex-2a8d4b": "globex"}
"""Bearer token → tenant, as the HTTP server knows them (the tests grep for the tokens)."""


def stdio_command(record: Path) -> list[str]:
    return [sys.executable, SERVER, "--record", str(record)]


def records(path: Path, **match: Any) -> list[dict[str, Any]]:
    """The calls the server recorded, optionally those whose fields equal ``match``."""
    if not path.exists():
        return []
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in found if all(r.get(k) == v for k, v in match.items())]


def wait_records(path: Path, count: int = 1, timeout: float = 20, **match: Any) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(found := records(path, **match)) < count:
        assert time.monotonic() < deadline, f"{count} records {match} not seen: {records(path)}"
        time.sleep(0.05)
    return found


@dataclass
class HttpUpstream:
    url: str
    record: Path
    proc: subprocess.Popen[bytes]


def start_http(record: Path) -> HttpUpstream:
    port = _free_port()
    proc = subprocess.Popen(
        [*stdio_command(record), "--http", str(port), "--tokens", json.dumps(TOKENS)],
        start_new_session=True,
    )
    wait_listening(proc, port, "the upstream HTTP server")
    return HttpUpstream(f"http://127.0.0.1:{port}/mcp", record, proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture
def http_upstream(tmp_path: Path) -> Iterator[HttpUpstream]:
    upstream = start_http(tmp_path / "http-calls.jsonl")
    yield upstream
    stop(upstream.proc)


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "calls.jsonl"


@pytest.fixture
def wait_records_fn() -> Callable[..., list[dict]]:
    return wait_records


@contextmanager
def serve_api(settings: Any, registry: Any, tokens: Any) -> Iterator[str]:
    """The HTTP API (and dashboard) over ``registry``, in a thread, for the test's duration."""
    from tests.conftest import serve
    from toolq.api.app import create_app

    served = serve(create_app(settings, registry, tokens=tokens))
    url = next(served)
    try:
        yield url
    finally:
        next(served, None)


@pytest.fixture
def new_registry() -> Iterator[Callable[[], Any]]:
    """Fresh registries whose upstream sessions (and stdio servers) close at teardown."""
    from toolq import ToolRegistry

    made: list[ToolRegistry] = []

    def make() -> ToolRegistry:
        made.append(ToolRegistry())
        return made[-1]

    yield make
    for registry in made:
        for toolset in registry.toolsets:
            toolset.close()
