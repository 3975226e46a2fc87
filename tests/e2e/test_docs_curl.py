"""The HTTP API guide's examples, run as written with real ``curl`` against a live stack.

The curl block is read from docs/guide/http-api.md; only what the page says to replace is
replaced (``CALL_ID``, ``DIGEST``, ``TICKET``), plus the port (8000 may be taken on a test
machine).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import ROOT
from toolq.cli.stack import _free_port

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl command"),
]

PAGE = (ROOT / "docs/guide/http-api.md").read_text(encoding="utf-8")
APP = "examples.demo_app:registry"


def documented_tokens() -> str:
    """``TOOLQ_API_TOKENS`` as the page's export line sets it (evaluated by bash)."""
    export = re.search(r"^export TOOLQ_API_TOKENS='.*?'$", PAGE, re.M | re.S)
    assert export, "the HTTP API guide lost its TOOLQ_API_TOKENS export"
    done = subprocess.run(
        ["bash", "-c", export.group(0) + '\nprintf %s "$TOOLQ_API_TOKENS"'],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def documented_curls() -> tuple[str, list[str]]:
    """The ``H=...`` line and each curl command of the page's API block."""
    block = re.search(r"```bash\n(H='Authorization: Bearer agent-token'\n.*?)```", PAGE, re.S)
    assert block, "the HTTP API guide lost its curl block"
    joined = block.group(1).replace("\\\n", " ")
    lines = [line for line in joined.splitlines() if line.strip()]
    commands: list[str] = []
    for line in lines[1:]:
        if line.startswith("curl "):
            commands.append(line)
        else:  # the second line of the dispatch body
            commands[-1] += "\n" + line
    return lines[0], commands


@pytest.fixture
def stack(settings, workers, tmp_path) -> Iterator[str]:
    env = {"TOOLQ_APP": APP, "TOOLQ_DEMO_DIR": str(tmp_path)}
    workers.start(pool="threads", **env)
    port = _free_port()
    environ = {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "TOOLQ_API_TOKENS": documented_tokens(),
        "PYTHONPATH": str(ROOT),
        **env,
    }
    api = subprocess.Popen(
        [sys.executable, "-m", "toolq", "api", "--app", APP, "--port", str(port)],
        env=environ,
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert api.poll() is None and time.monotonic() < deadline, "toolq api did not start"
        time.sleep(0.2)
    try:
        yield url
    finally:
        api.terminate()
        api.wait(15)


def curl(header_line: str, command: str, port: int, **values: str) -> tuple[int, str]:
    """Run one documented command in bash, as written but for the substitutions."""
    command = command.replace("localhost:8000", f"127.0.0.1:{port}")
    for name, value in values.items():
        command = command.replace(name, value)
    bare = re.split(r"\s+# ", command)[0]  # without the trailing comment
    script = f"{header_line}\n{bare} --max-time 3 -w '\\n%{{http_code}}'"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


def test_http_api_guide_curl_examples_work_as_written(stack):
    port = int(stack.rsplit(":", 1)[1])
    header, commands = documented_curls()
    by_path = {}
    for command in commands:
        found = re.search(r"localhost:8000(\S*)", command)
        assert found, command
        by_path[found.group(1).strip("'")] = command

    def run(path: str, **values: str) -> tuple[int, str]:
        return curl(header, by_path[path], port, **values)

    status, _ = run("/v1/tools?format=anthropic")
    assert status == 200
    status, body = run("/v1/runs/run-1/calls")
    assert status == 202, body
    calls = {c["tool_call_id"]: c["call_id"] for c in json.loads(body)["calls"]}
    parked = calls["c2"]
    status, body = run("/v1/calls/CALL_ID", CALL_ID=calls["c1"])
    assert status == 200 and json.loads(body)["name"] == "get_weather"
    status, body = run("/v1/runs/run-1/events/ticket")
    assert status == 200
    ticket = json.loads(body)["ticket"]
    status, body = run("/v1/runs/run-1/events?ticket=TICKET", TICKET=ticket)
    assert status == 200 and "event: call.queued" in body
    status, body = run("/v1/runs/run-1/events")
    assert status == 200 and "event: call.awaiting_approval" in body
    status, body = run("/v1/runs/run-1/events?follow=false")
    assert status == 200 and json.loads(body)
    status, body = run("/v1/runs/run-1/messages?format=openai")
    assert status == 200 and [m["tool_call_id"] for m in json.loads(body)] == ["c1", "c2"]
    status, body = run("/v1/approvals?run_id=run-1")
    assert status == 200
    [pending] = json.loads(body)
    assert pending["call_id"] == parked
    # The approve body is sent by curl -d, without a JSON Content-Type.
    status, body = run("/v1/approvals/CALL_ID/approve", CALL_ID=parked, DIGEST=pending["digest"])
    assert status == 200, body
    # Deny needs a call of its own: dispatch a second parked call like the first one.
    token = {"Authorization": "Bearer agent-token"}
    again = httpx.post(
        f"{stack}/v1/runs/run-1/calls",
        headers=token,
        json=[{"id": "c3", "name": "archive_logs", "arguments": {"older_than_days": 7}}],
    )
    other = again.json()["calls"][0]["call_id"]
    status, body = run("/v1/approvals/CALL_ID/deny", CALL_ID=other)
    assert status == 200 and json.loads(body)["status"] == "denied"
    status, body = run("/v1/calls/CALL_ID/cancel", CALL_ID=calls["c1"])
    assert status == 200, body
    status, body = run("/v1/calls/CALL_ID/undo", CALL_ID=calls["c1"])
    # get_weather has no undo handler (and the cancel may have caught it before it ran)
    assert status == 409 and ("nothing to undo" in body or "only a call that succeeded" in body)
    status, body = run("/metrics")
    assert status == 200 and "toolq_queue_depth" in body
    final = httpx.get(f"{stack}/v1/calls/{parked}", headers=token)
    deadline = time.monotonic() + 20
    while final.json()["status"] != "succeeded":
        assert time.monotonic() < deadline, final.json()
        time.sleep(0.2)
        final = httpx.get(f"{stack}/v1/calls/{parked}", headers=token)
    assert final.json()["output"]["older_than_days"] == 60  # the approver's edit ran


def test_wrong_role_is_403_before_the_body_is_looked_at(stack):
    agent = {"Authorization": "Bearer agent-token"}
    body = [{"id": "x", "name": "archive_logs", "arguments": {"older_than_days": 1}}]
    parked = httpx.post(f"{stack}/v1/runs/r9/calls", headers=agent, json=body).json()
    call_id = parked["calls"][0]["call_id"]
    for action, bad in (("approve", '{"arguments": 5}'), ("deny", "{not json")):
        got = httpx.post(f"{stack}/v1/approvals/{call_id}/{action}", headers=agent, content=bad)
        assert got.status_code == 403 and got.json()["error"]["code"] == "forbidden"
    alice = {"Authorization": "Bearer alice-token"}
    shape = httpx.post(
        f"{stack}/v1/approvals/{call_id}/approve", headers=alice, content='{"arguments": 5}'
    )
    assert shape.status_code == 422  # the right role, then the body is checked
    # The page says the digest is required: without it, 422 and a pointer to the review.
    unseen = httpx.post(
        f"{stack}/v1/approvals/{call_id}/approve", headers=alice, content='{"note": "ok"}'
    )
    assert unseen.status_code == 422 and "# digest required" in PAGE
    assert f"GET /v1/approvals/{call_id}" in unseen.json()["error"]["message"]
    pending = httpx.get(f"{stack}/v1/approvals/{call_id}", headers=alice).json()
    assert pending["status"] == "awaiting_approval"  # nothing decided by the refused requests
