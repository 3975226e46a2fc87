"""A local Slack Web API (the methods toolq calls) and interactions signed as Slack signs them."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

BOT_TOKEN = "xoxb-test-token"
SIGNING_SECRET = "slack-signing-secret-for-tests"
TEAM = "T0TOOLQ"
METHODS = ("chat.postMessage", "chat.update", "chat.postEphemeral", "views.open")


@dataclass
class Sent:
    """One Web API call toolq made."""

    method: str
    body: dict[str, Any]
    at: float
    ts: str = ""
    """The ``ts`` Slack gave a posted message."""


@dataclass
class FakeSlack:
    """Slack's Web API for the methods toolq calls: checks the bot token, answers as Slack
    does (``ok``, ``ts``), records every call; ``limit`` answers 429 with ``Retry-After`` to
    the first N calls of a method."""

    url: str = ""
    sent: list[Sent] = field(default_factory=list)
    limit: dict[str, tuple[int, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stamps: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def api(self) -> str:
        return f"{self.url}/api/"

    def answer(self, method: str, token: str, body: dict[str, Any]) -> tuple[int, dict, dict]:
        with self.lock:
            if token != BOT_TOKEN:
                return 200, {}, {"ok": False, "error": "invalid_auth"}
            if method not in METHODS:
                return 200, {}, {"ok": False, "error": "unknown_method"}
            count, retry_after = self.limit.get(method, (0, 0))
            if count:
                self.limit[method] = (count - 1, retry_after)
                self.sent.append(Sent(f"{method}:429", body, time.time()))
                return 429, {"Retry-After": str(retry_after)}, {"ok": False, "error": "ratelimited"}
            self.sent.append(Sent(method, body, time.time()))
            if method == "chat.postMessage":
                ts = f"1700000000.{next(self.stamps):06d}"
                self.sent[-1].ts = ts
                return 200, {}, {"ok": True, "channel": body.get("channel"), "ts": ts}
            if method == "chat.update":
                return 200, {}, {"ok": True, "channel": body.get("channel"), "ts": body.get("ts")}
            return 200, {}, {"ok": True}

    def of(self, method: str, **match: Any) -> list[Sent]:
        with self.lock:
            return [
                s
                for s in self.sent
                if s.method == method and all(s.body.get(k) == v for k, v in match.items())
            ]

    def wait(self, method: str, count: int = 1, timeout: float = 20, **match: Any) -> list[Sent]:
        deadline = time.monotonic() + timeout
        while len(self.of(method, **match)) < count:
            assert time.monotonic() < deadline, (
                f"{count} x {method} {match} not seen; sent: "
                f"{[(s.method, s.body.get('channel')) for s in self.sent]}"
            )
            time.sleep(0.05)
        return self.of(method, **match)


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    state = FakeSlack()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = {}
            auth = self.headers.get("Authorization", "")
            method = self.path.removeprefix("/api/")
            status, headers, answer = state.answer(method, auth.removeprefix("Bearer "), body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``X-Slack-Signature`` as Slack computes it (v0, HMAC-SHA256)."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def interact(
    api: str,
    payload: dict[str, Any],
    *,
    secret: str = SIGNING_SECRET,
    timestamp: int | None = None,
    tamper: bool = False,
) -> httpx.Response:
    """POST an interaction payload to toolq as Slack sends it: form-encoded, signed."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = slack_signature(secret, stamp, body)
    if tamper:
        body = body.replace(b"approve", b"apprOve", 1)
    return httpx.post(
        f"{api}/v1/slack/interactions",
        content=body,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature,
        },
    )


def press(
    action_id: str,
    value: str,
    user: str,
    *,
    channel: str = "C0APPROVE",
    ts: str = "1700000000.000001",
    team: str = TEAM,
) -> dict[str, Any]:
    """A ``block_actions`` payload: ``user`` pressed a button of a message."""
    return {
        "type": "block_actions",
        "user": {"id": user, "team_id": team},
        "team": {"id": team},
        "channel": {"id": channel},
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "message": {"ts": ts},
        "trigger_id": f"trigger-{user}-{time.time()}",
        "response_url": "https://hooks.slack.invalid/actions/never-used",
        "actions": [{"action_id": action_id, "value": value, "type": "button"}],
    }


def submit_deny(view: dict[str, Any], user: str, reason: str, team: str = TEAM) -> dict[str, Any]:
    """A ``view_submission`` of the deny modal toolq opened, with ``reason`` typed in."""
    return {
        "type": "view_submission",
        "user": {"id": user, "team_id": team},
        "team": {"id": team},
        "view": {
            "id": "V0MODAL",
            "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "state": {
                "values": {"reason": {"reason": {"type": "plain_text_input", "value": reason}}}
            },
        },
    }


def button(blocks: list[dict[str, Any]], action_id: str) -> dict[str, Any] | None:
    for block in blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == action_id:
                return element
    return None


def text_of(blocks: list[dict[str, Any]]) -> str:
    """Every text of a message's blocks, joined (what a reader sees, unrendered)."""
    return json.dumps(blocks, ensure_ascii=False)
