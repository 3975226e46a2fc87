"""Secrets in arguments never show up in anything toolq writes or answers.

The one place a secret argument lives is the call's own record (``envelope``), which the
worker needs to run the call; everything else is grepped: every Redis key and value, the
worker's log at debug level, every API response.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_api import api, h  # noqa: F401 - the uvicorn fixture
from toolq import CallStatus

pytestmark = pytest.mark.e2e

SECRET = "sk-live-7f3a9c1e5b2d4f6a8c0e"


def everything_in_redis(r) -> list[bytes]:
    found: list[bytes] = []
    for key in r.scan_iter(count=1000):
        kind = r.type(key).decode()
        found.append(key)
        if kind == "string":
            found.append(r.get(key) or b"")
        elif kind == "hash":
            for field, value in r.hgetall(key).items():
                if key.startswith(b"toolq:call:") and field == b"envelope":
                    continue  # the record the worker runs the call from
                found += [field, value]
        elif kind == "list":
            found += r.lrange(key, 0, -1)
        elif kind == "set":
            found += list(r.smembers(key))
        elif kind == "zset":
            found += [m for m, _ in r.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            for _, fields in r.xrange(key):
                for field, value in fields.items():
                    found += [field, value]
    return found


def test_secret_arguments_never_leak(api, workers, r, tmp_path: Path):  # noqa: F811
    log = tmp_path / "worker.log"
    workers.start(log=log, loglevel="debug")
    posted = httpx.post(
        f"{api}/v1/runs/sec/calls",
        headers=h("agent-t"),
        json=[
            {"id": "s1", "name": "login", "arguments": {"user": "ann", "password": SECRET}},
        ],
    ).json()
    call_id = posted["calls"][0]["call_id"]
    responses = [
        httpx.get(f"{api}/v1/approvals", headers=h("view-t")).text,
        httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("view-t")).text,
    ]
    approved = httpx.post(f"{api}/v1/approvals/{call_id}/approve", headers=h("alice-t"))
    assert approved.status_code == 200
    deadline = time.monotonic() + 20
    while (
        httpx.get(f"{api}/v1/calls/{call_id}", headers=h("view-t")).json()["status"] != "succeeded"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    responses += [
        approved.text,
        httpx.get(f"{api}/v1/calls/{call_id}", headers=h("view-t")).text,
        httpx.get(f"{api}/v1/runs/sec/calls", headers=h("view-t")).text,
        httpx.get(
            f"{api}/v1/runs/sec/events", params={"follow": "false"}, headers=h("view-t")
        ).text,
        httpx.get(f"{api}/v1/runs/sec/messages", headers=h("view-t")).text,
        httpx.get(f"{api}/metrics", headers=h("view-t")).text,
        httpx.get(f"{api}/", headers=h("view-t")).text,
    ]
    assert "ann logged in" in responses[3]
    for text in responses:
        assert SECRET not in text
    assert "**********" in responses[1]
    for blob in everything_in_redis(r):
        assert SECRET.encode() not in blob
    workers.stop_all()
    assert log.read_text(errors="replace").strip()  # the log was written
    assert SECRET not in log.read_text(errors="replace")
    assert r.hget(f"toolq:call:{call_id}", "status") == CallStatus.SUCCEEDED.value.encode()
