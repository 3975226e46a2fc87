"""``toolq mcp`` driven by the official MCP client: stdio subprocess, real Redis, a worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
import redis
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp_types import CallToolResult, TextContent

from tests.conftest import ROOT, InProcess, wait_listening
from toolq import CallStatus, Client, Settings

pytestmark = pytest.mark.e2e

Scenario = Callable[[McpClient], Awaitable[None]]


def server_params(settings: Settings, *extra: str) -> StdioServerParameters:
    env = {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "TOOLQ_APP": "tests.apps:registry",
        "PYTHONPATH": str(ROOT),
    }
    argv = ["-m", "toolq", "mcp", "--app", "tests.apps:registry", "--transport", "stdio"]
    return StdioServerParameters(
        command=sys.executable, args=[*argv, *extra], env=env, cwd=str(ROOT)
    )


def run(settings: Settings, scenario: Scenario, *extra: str) -> None:
    async def main() -> None:
        with anyio.fail_after(60):
            async with McpClient(server_params(settings, *extra)) as session:
                await scenario(session)

    anyio.run(main)


def text_of(result: CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


def toolq_meta(result: CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    meta: dict[str, Any] = result.meta["toolq"]
    return meta


def test_tools_list_and_calls_through_the_queue(settings: Settings, inproc: InProcess) -> None:
    from tests.apps import registry

    inproc.start("safe,moderate")
    seen: dict[str, Any] = {}

    async def scenario(session: McpClient) -> None:
        listed = await session.list_tools()
        tools = {t.name: t for t in listed.tools}
        expected = {s["name"] for s in registry.schemas("mcp")}
        assert set(tools) == expected
        assert {"echo", "add", "wipe"} <= set(tools)
        assert "beta_feature" in tools and "offline" not in tools  # only active tools
        for tool in tools.values():
            assert isinstance(tool.input_schema, dict) and tool.input_schema["type"] == "object"
        assert tools["add"].input_schema["required"] == ["a", "b"]

        added = await session.call_tool("add", {"a": 2, "b": 3})
        assert not added.is_error
        assert added.structured_content == {"result": 5}
        assert text_of(added) == "5"
        seen["add"] = toolq_meta(added)

        echoed = await session.call_tool("echo", {"text": "hi"})
        assert not echoed.is_error
        assert echoed.structured_content == {"text": "hi"}

        unknown = await session.call_tool("nope", {})
        assert unknown.is_error
        assert "nope" in text_of(unknown)

        invalid = await session.call_tool("add", {"a": "two", "b": 3})
        assert invalid.is_error

    run(settings, scenario)

    # The call went through the dispatcher: a real record in Redis, principal and run recorded.
    with Client(registry, settings) as client:
        result = client.result(seen["add"]["call_id"])
        assert result.status is CallStatus.SUCCEEDED and result.output == 5
        assert result.run_id == seen["add"]["run_id"]
        assert client.store.envelope(result.call_id).principal == "mcp"


def test_dangerous_call_waits_for_approval(settings: Settings, inproc: InProcess) -> None:
    from tests.apps import registry

    inproc.start("safe,moderate,dangerous")

    async def scenario(session: McpClient) -> None:
        pending = await session.call_tool("wipe", {"target": "prod"})
        assert pending.is_error
        meta = toolq_meta(pending)
        call_id = meta["call_id"]
        assert meta["status"] == "awaiting_approval"
        assert "awaiting approval" in text_of(pending)
        assert f"toolq approvals approve {call_id}" in text_of(pending)

        # The same call again re-attaches to the parked call: no second approval request.
        again = await session.call_tool("wipe", {"target": "prod"})
        assert again.is_error and toolq_meta(again)["call_id"] == call_id

        with Client(registry, settings) as client:
            assert [p.call_id for p in client.approvals.pending()] == [call_id]
            await anyio.to_thread.run_sync(lambda: client.approvals.approve(call_id, by="alice"))
            final = await anyio.to_thread.run_sync(lambda: client.wait([call_id], timeout=20)[0])
            assert final.status is CallStatus.SUCCEEDED and final.output == "wiped prod"
            assert int(client.redis.llen(f"test:exec:{call_id}")) == 1

        # Once decided, the identical call returns the parked call's result ...
        done = await session.call_tool("wipe", {"target": "prod"})
        assert not done.is_error
        assert toolq_meta(done)["call_id"] == call_id
        assert done.structured_content == {"result": "wiped prod"}

        # ... and after that, an identical call is a new call that parks again.
        fresh = await session.call_tool("wipe", {"target": "prod"})
        assert fresh.is_error and toolq_meta(fresh)["call_id"] != call_id

    run(settings, scenario, "--approval-wait", "1")


def test_approval_within_the_wait_returns_the_result(settings: Settings, inproc: InProcess) -> None:
    from tests.apps import registry

    inproc.start("safe,moderate,dangerous")

    async def approve_when_parked() -> None:
        with Client(registry, settings) as client:
            while not (pending := await anyio.to_thread.run_sync(client.approvals.pending)):
                await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(
                lambda: client.approvals.approve(pending[0].call_id, by="alice")
            )

    async def scenario(session: McpClient) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(approve_when_parked)
            result = await session.call_tool("wipe", {"target": "staging"})
        assert not result.is_error
        assert result.structured_content == {"result": "wiped staging"}

    run(settings, scenario, "--approval-wait", "30")


MCP_TOKENS = {
    "mcp-agent-t": {"principal": "agent", "roles": ["submitter"]},
    "mcp-view-t": {"principal": "watcher", "roles": ["viewer"]},
}


NO_TOKEN_CLIENT = """
import sys, anyio
from mcp import Client

async def main():
    async with Client(sys.argv[1]) as session:
        await session.list_tools()

try:
    anyio.run(main)
except BaseException as exc:
    print("refused:", repr(exc))
    sys.exit(3)
print("listed tools without a token")
"""


def http_session(port: int, token: str | None) -> McpClient:
    """The official client over Streamable HTTP, with a bearer token when given."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else None
    http = create_mcp_http_client(headers=headers)
    return McpClient(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http))


@contextmanager
def http_server(settings: Settings, tokens: dict[str, Any], *extra: str) -> Iterator[int]:
    """``toolq mcp --transport http`` with ``tokens`` in a child process; yields its port."""
    from toolq.cli.stack import _free_port

    port = _free_port()
    params = server_params(settings, "--port", str(port), *extra)
    argv = [*params.args]
    argv[argv.index("stdio")] = "http"
    env = {**(params.env or {}), "TOOLQ_API_TOKENS": json.dumps(tokens)}
    proc = subprocess.Popen([sys.executable, *argv], env=env, cwd=ROOT)
    try:
        wait_listening(proc, port, "toolq mcp --transport http")
        yield port
    finally:
        proc.terminate()
        proc.wait(15)


def test_streamable_http_transport(settings: Settings, inproc: InProcess) -> None:
    import httpx

    inproc.start("safe,moderate")
    r = redis.Redis.from_url(settings.redis_url)
    with http_server(settings, MCP_TOKENS) as port:
        # The attack: tools/call over HTTP with no token, or a token without `submitter`.
        def calls_stored() -> int:
            return len(r.keys("toolq:call:*")) + len(r.keys("toolq:run:*"))

        before = calls_stored()
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1, "b": 1}},
        }
        accept = {"Accept": "application/json, text/event-stream"}
        url = f"http://127.0.0.1:{port}/mcp"
        bare = httpx.post(url, json=call, headers=accept)
        assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
        as_viewer = {**accept, "Authorization": "Bearer mcp-view-t"}
        viewer = httpx.post(url, json=call, headers=as_viewer)
        assert viewer.status_code == 403
        wrong = httpx.post(url, json=call, headers={**accept, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        in_url = httpx.post(url, params={"token": "mcp-agent-t"}, json=call, headers=accept)
        assert in_url.status_code == 401
        assert calls_stored() == before == 0  # nothing dispatched

        # The official client without a token. It runs in a child process: the SDK's deep
        # exception group trips CPython 3.11's AST recursion counter in the pytest process.
        probe = subprocess.run(
            [sys.executable, "-c", NO_TOKEN_CLIENT, f"http://127.0.0.1:{port}/mcp"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert probe.returncode == 3 and "MCPError" in probe.stdout, probe.stdout + probe.stderr
        assert calls_stored() == 0

        async def main() -> None:
            with anyio.fail_after(30):
                async with http_session(port, "mcp-agent-t") as session:
                    names = {t.name for t in (await session.list_tools()).tools}
                    assert {"echo", "add", "wipe"} <= names
                    added = await session.call_tool("add", {"a": 20, "b": 22})
                    assert not added.is_error and added.structured_content == {"result": 42}
                    assert toolq_meta(added)["run_id"].startswith("mcp-")

        anyio.run(main)
    r.close()
