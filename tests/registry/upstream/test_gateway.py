"""``toolq mcp`` as the gateway: one MCP endpoint for the app's tools and every upstream's.

An MCP client (the SDK's) talks to a real ``toolq mcp`` process; calls run on a real worker
process; the upstream servers are ``tests/registry/upstream/server.py`` over stdio and over HTTP.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.conftest import ROOT, SECRETS_KEY, Workers, settings_with_env
from tests.registry.upstream.conftest import HttpUpstream, records, stdio_command
from toolq import Client
from toolq.cli.common import load_registry

pytestmark = pytest.mark.e2e

APP = "tests.registry.upstream.app:make"


def test_toolq_mcp_serves_own_and_upstream_tools_with_approvals_and_list_changed(
    settings, workers: Workers, http_upstream: HttpUpstream, record: Path
) -> None:
    servers = [
        {"name": "notes", "command": stdio_command(record)},
        {
            "name": "tickets",
            "url": http_upstream.url,
            "headers": {"Authorization": "Bearer tok-lister-5b1d"},
        },
    ]
    env = {"TOOLQ_APP": APP, "TOOLQ_MCP_SERVERS": json.dumps(servers)}
    workers.start(**env)
    own = settings_with_env(settings, env)
    gateway = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolq", "mcp", "--approval-wait", "1", "--principal", "ide"],
        env={
            **env,
            "TOOLQ_REDIS_URL": settings.redis_url,
            "TOOLQ_SECRETS_KEY": SECRETS_KEY,
            "PYTHONPATH": str(ROOT),
            "PATH": os.environ["PATH"],
        },
        cwd=str(ROOT),
    )
    # The approver's process: editing arguments needs the tools (to validate the edit).
    registry = load_registry(own.app, own)
    with Client(registry, own) as approvals:

        async def scenario() -> None:
            async with stdio_client(gateway) as (read, write), ClientSession(read, write) as ide:
                await ide.initialize()
                listed = {t.name: t for t in (await ide.list_tools()).tools}
                assert {"echo", "notes_read_note", "tickets_whoami"} <= set(listed)
                assert listed["notes_read_note"].input_schema["properties"] == {
                    "name": {"type": "string"}
                }
                assert "notes_extra" not in listed and "tickets_extra" not in listed
                assert text(await ide.call_tool("echo", {"text": "hi"})) == "hi"
                assert text(await ide.call_tool("notes_read_note", {"name": "todo"})) == "buy milk"
                assert text(await ide.call_tool("tickets_whoami", {})) == "lister"

                pending = await ide.call_tool("notes_delete_note", {"name": "todo"})
                assert pending.is_error and "awaiting approval" in text(pending)
                call_id = (pending.meta or {})["toolq"]["call_id"]
                assert records(record, tool="delete_note") == []
                await anyio.to_thread.run_sync(
                    lambda: approvals.approvals.approve(
                        call_id, by="alice", arguments={"name": "groceries"}
                    )
                )
                done = await ide.call_tool("notes_delete_note", {"name": "todo"})
                assert not done.is_error and text(done) == "deleted groceries"

                assert text(await ide.call_tool("tickets_grow", {})) == "grown"
                deadline = time.monotonic() + 20
                while "tickets_extra" not in {t.name for t in (await ide.list_tools()).tools}:
                    assert time.monotonic() < deadline, "the gateway did not follow list_changed"
                    await anyio.sleep(0.2)
                # The worker's registry followed too: the new tool runs there.
                assert text(await ide.call_tool("tickets_extra", {})) == "extra"

        anyio.run(scenario)
    for toolset in registry.toolsets:
        toolset.close()
    assert [(r["tool"], r["arguments"]) for r in records(record)] == [
        ("read_note", {"name": "todo"}),
        ("delete_note", {"name": "groceries"}),
    ]
    assert [r["tool"] for r in records(http_upstream.record)] == ["whoami", "grow", "extra"]


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")
