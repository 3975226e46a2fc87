"""An HTTP endpoint for deliveries, and helpers shared by the webhook tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def json(self) -> dict[str, object]:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP endpoint that answers 500 to the first ``fail_first`` requests of each path, and
    to the first ``fail_event`` requests of each event type (``X-Toolq-Event``) on a path."""

    url: str = ""
    fail_first: dict[str, int] = field(default_factory=dict)
    fail_event: dict[tuple[str, str], int] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            seen = sum(1 for r in self.received if r.path == path)
            event = headers.get("X-Toolq-Event", "")
            of_event = sum(
                1
                for r in self.received
                if r.path == path and r.headers.get("X-Toolq-Event") == event
            )
            failing = seen < self.fail_first.get(path, 0) or of_event < self.fail_event.get(
                (path, event), 0
            )
            status = 500 if failing else 204
            self.received.append(Received(path, headers, body, status))
            return status

    def of(self, path: str, answered: int | None = None) -> list[Received]:
        with self.lock:
            return [
                r
                for r in self.received
                if r.path == path and (answered is None or r.answered == answered)
            ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status = state.handle(self.path, dict(self.headers.items()), body)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def call(call_id: str, name: str, **arguments: object) -> list[dict[str, object]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


def wait_until(predicate: Callable[[], object], timeout: float = 20, message: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, message or "condition not met in time"
        time.sleep(0.05)
