"""SIGTERM to a real ``toolq api`` ends its open event streams at once; clients resume.

uvicorn waits for open connections before it exits, and an event stream stays open as long
as its client: without draining, a stop waited for the last dashboard to leave.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.conftest import ROOT, SECRETS_KEY, InProcess, serve
from toolq.api.app import create_app
from toolq.cli.stack import _free_port
from toolq.settings import ApiToken, Settings

pytestmark = pytest.mark.e2e

ADMIN = "tq_shutdown_admin_token"
HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def dispatch(base: str, run_id: str, tool_call_id: str) -> None:
    body = [{"id": tool_call_id, "name": "echo", "arguments": {"text": tool_call_id}}]
    sent = httpx.post(f"{base}/v1/runs/{run_id}/calls", json=body, headers=HEADERS, timeout=30)
    assert sent.status_code == 202, sent.text


def ids_of(lines: list[str]) -> list[str]:
    return [line.removeprefix("id: ") for line in lines if line.startswith("id: ")]


def test_sigterm_ends_event_streams_and_the_client_resumes(
    settings: Settings, inproc: InProcess
) -> None:
    from tests.apps import registry

    inproc.start()
    port = _free_port()
    env = {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "TOOLQ_APP": "tests.apps:registry",
        "TOOLQ_API_TOKENS": json.dumps({ADMIN: {"principal": "ops", "roles": ["admin"]}}),
        "TOOLQ_SECRETS_KEY": SECRETS_KEY,
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolq", "api", "--port", str(port), "--log-level", "warning"],
        env=env, cwd=ROOT, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    lines: list[str] = []
    ended = threading.Event()

    def read() -> None:
        try:
            with httpx.stream("GET", f"{base}/v1/runs/drain/events", headers=HEADERS,
                              timeout=httpx.Timeout(60, connect=10)) as stream:  # fmt: skip
                for line in stream.iter_lines():
                    lines.append(line)
        except httpx.HTTPError as exc:
            lines.append(f"error: {exc!r}")
        finally:
            ended.set()

    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "toolq api exited"
            try:
                if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "toolq api did not come up"
            time.sleep(0.2)
        dispatch(base, "drain", "first")
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.monotonic() + 30
        while not any("call.succeeded" in line for line in lines):
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)

        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
        took = time.monotonic() - sent
        assert ended.wait(5), "the stream did not end"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    assert proc.returncode in (0, -signal.SIGTERM), proc.returncode  # uvicorn re-raises it
    assert took < 5, f"toolq api took {took:.1f}s to stop with an event stream open"
    assert not any(line.startswith("error:") for line in lines), lines
    seen = ids_of(lines)
    assert seen, lines

    # The client resumes where it was, on another API process: nothing twice, nothing lost.
    tokens = {ADMIN: ApiToken(principal="ops", roles=["admin"])}
    for other in serve(create_app(settings, registry, tokens=tokens)):
        dispatch(other, "drain", "second")
        resumed: list[str] = []
        with httpx.stream("GET", f"{other}/v1/runs/drain/events",
                          headers={**HEADERS, "Last-Event-ID": seen[-1]},
                          timeout=30) as stream:  # fmt: skip
            for line in stream.iter_lines():
                resumed.append(line)
                if "call.succeeded" in line:
                    break
        again = ids_of(resumed)
        assert again and not set(again) & set(seen), (seen, again)
        assert any('"second"' in line for line in resumed)
        assert not any('"first"' in line for line in resumed)
