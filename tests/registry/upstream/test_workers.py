"""Upstream MCP tools run on real ``toolq worker`` processes, which hold the sessions.

Each worker process starts and supervises its own stdio server (``server.py`` beside this file,
which records what it receives, its pid and its parent's). Approvals, progress, cancel and
a server killed mid-call cross the process boundaries as they would in production.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Workers, settings_with_env
from tests.registry.upstream.conftest import records, stdio_command, wait_records
from toolq import CallStatus, Client, EventType, Settings
from toolq.cli.common import load_registry

pytestmark = pytest.mark.e2e

APP = "tests.registry.upstream.app:make"


def upstream_env(*servers: dict[str, Any]) -> dict[str, str]:
    return {"TOOLQ_APP": APP, "TOOLQ_MCP_SERVERS": json.dumps(list(servers))}


def notes(record: Path, **more: Any) -> dict[str, Any]:
    return {"name": "notes", "command": stdio_command(record), **more}


def call(tool: str, call_id: str = "c1", /, **arguments: Any) -> list[dict[str, Any]]:
    return [{"id": call_id, "name": tool, "arguments": arguments}]


@contextmanager
def client_for(settings: Settings, env: dict[str, str]) -> Iterator[Client]:
    own = settings_with_env(settings, env)
    registry = load_registry(own.app, own)
    try:
        with Client(registry, own) as client:
            yield client
    finally:
        for toolset in registry.toolsets:
            toolset.close()


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_a_read_only_tool_runs_on_a_worker_process_that_holds_the_session(
    settings, workers: Workers, record: Path
) -> None:
    env = upstream_env(notes(record))
    proc = workers.start("safe", pool="prefork", concurrency=1, **env)
    with client_for(settings, env) as client:
        batch = client.dispatch(call("notes_read_note", name="todo"), run_id="r1")
        assert batch.calls[0].status is CallStatus.QUEUED  # safe: no approval
        [result] = batch.wait(timeout=60)
        assert result.status is CallStatus.SUCCEEDED, result.error
        assert result.content[0].text == "buy milk"
        assert client.to_messages("r1", "openai")[0]["content"] == "buy milk"
    [received] = records(record, tool="read_note")
    assert received["arguments"] == {"name": "todo"}
    # Started by the pool process that ran the call, a child of the worker: not by this
    # test, and not by the worker's parent process (which only listed the tools).
    assert received["ppid"] not in (os.getpid(), proc.pid)
    assert parent_of(received["ppid"]) == proc.pid


def test_a_destructive_tool_parks_and_only_the_approved_arguments_reach_the_server(
    settings, workers: Workers, record: Path
) -> None:
    env = upstream_env(notes(record))
    workers.start(**env)
    with client_for(settings, env) as client:
        delete = client.dispatch(call("notes_delete_note", name="todo"), principal="agent")
        mystery = client.dispatch(call("notes_mystery", "c2", x=7), principal="agent")
        assert delete.calls[0].status is CallStatus.AWAITING_APPROVAL  # destructiveHint
        assert mystery.calls[0].status is CallStatus.AWAITING_APPROVAL  # no annotations
        parked = client.approvals.get(delete.call_ids[0])
        assert parked.approval_metadata == {
            "mcp_server": "notes",
            "tool": "delete_note",
            "annotations": {"destructiveHint": True},
        }
        time.sleep(1.0)
        assert records(record) == []  # nothing reached the server while parked
        client.approvals.approve(delete.call_ids[0], by="alice", arguments={"name": "groceries"})
        [done] = delete.wait(timeout=60)
        assert done.status is CallStatus.SUCCEEDED and done.content[0].text == "deleted groceries"
        client.approvals.deny(mystery.call_ids[0], by="alice", reason="not today")
        assert mystery.wait(timeout=30)[0].status is CallStatus.DENIED
    assert [(r["tool"], r["arguments"]) for r in records(record)] == [
        ("delete_note", {"name": "groceries"})
    ]


def test_progress_and_cancel_cross_the_boundary(settings, workers: Workers, record: Path) -> None:
    env = upstream_env(notes(record))
    workers.start(**env)
    with client_for(settings, env) as client:
        batch = client.dispatch(call("notes_count", steps=400, delay=0.05), run_id="r-count")
        progress = []
        for event in client.events("r-count", follow=True, timeout=60):
            if event.type is EventType.PROGRESS:
                progress.append(event.data["data"])
            if len(progress) == 3:
                break
        assert progress[0] == {"progress": 1, "total": 400, "message": "step 1"}
        assert [p["progress"] for p in progress] == [1, 2, 3]
        client.cancel(batch.call_ids[0])
        [result] = batch.wait(timeout=30)
        assert result.status is CallStatus.CANCELLED
    # The server got notifications/cancelled and stopped the request.
    wait_records(record, tool="count", event="cancelled")


def test_a_killed_stdio_server_follows_the_idempotency_rules(
    settings, workers: Workers, record: Path
) -> None:
    env = upstream_env(notes(record))
    workers.start(**env)
    with client_for(settings, env) as client:
        # Not idempotent (writes, no idempotentHint): its outcome is unknown, not run again.
        hang = client.dispatch(call("notes_hang", seconds=60), principal="agent")
        [started] = wait_records(record, tool="hang")
        os.kill(started["pid"], signal.SIGKILL)
        [lost] = hang.wait(timeout=60)
        assert lost.status is CallStatus.FAILED and lost.error_type == "worker_lost"
        assert "not run again" in (lost.error or "")
        assert len(records(record, tool="hang")) == 1
        # Read-only, so idempotent: run again on a restarted server.
        count = client.dispatch(call("notes_count", "c2", steps=20, delay=0.05), run_id="r-rerun")
        [first] = wait_records(record, tool="count")
        os.kill(first["pid"], signal.SIGKILL)
        [done] = count.wait(timeout=60)
        assert done.status is CallStatus.SUCCEEDED and done.content[0].text == "counted to 20"
        assert done.attempts == 2
        retried = [e for e in client.events("r-rerun") if e.type is EventType.RETRYING]
        assert len(retried) == 1 and "upstream MCP server 'notes' went away" in str(retried[0].data)
    runs = records(record, tool="count", event="call")
    assert len(runs) == 2 and runs[0]["pid"] != runs[1]["pid"]
    assert runs[1]["ppid"] == first["ppid"]  # the same worker restarted it


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_worker_runs_a_tool_the_server_added_after_it_listed(
    settings, workers: Workers, http_upstream, pool: str
) -> None:
    """The dispatcher heard ``list_changed`` first (a gateway): the worker lists again."""
    tickets = {
        "name": "tickets",
        "url": http_upstream.url,
        "headers": {"Authorization": "Bearer tok-lister-5b1d"},
    }
    env = upstream_env(tickets)
    workers.start("safe,moderate", pool=pool, concurrency=1, **env)
    with client_for(settings, env) as client:
        registry = client.registry
        assert "tickets_extra" not in registry
        assert registry.invoke("tickets_grow", {}).status is CallStatus.SUCCEEDED
        deadline = time.monotonic() + 20
        while "tickets_extra" not in registry:  # this process follows list_changed
            assert time.monotonic() < deadline, "the client's registry did not follow"
            time.sleep(0.05)
        [result] = client.dispatch(call("tickets_extra"), run_id="r-new").wait(timeout=60)
    assert result.status is CallStatus.SUCCEEDED, result.error
    assert result.content[0].text == "extra"
    assert [r["tool"] for r in records(http_upstream.record)] == ["grow", "extra"]
