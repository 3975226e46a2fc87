"""The MCP tasks extension, driven by the official SDK's client against ``toolq mcp``.

The client declares ``io.modelcontextprotocol/tasks`` through the SDK's extension seams (a
``ClientExtension`` claiming the ``task`` result type); a gated call comes back as a task,
its URL elicitation leads to the approval page, where an approver signs in and decides in
Chromium at a phone's size; the task completes with the ``CallToolResult``. A client
without the extension gets today's blocking answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import anyio
import httpx
import mcp_types as types
import pytest
import redis
from mcp import Client as McpClient
from mcp.client.context import ClientRequestContext
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import Field

from tests.approvals.conftest import Pair
from tests.conftest import ROOT, InProcess, make_settings, serve, wait_listening
from tests.e2e.test_dashboard import CHROMIUM, CHROMIUM_ARGS, expect
from tests.e2e.test_mcp import server_params, text_of, toolq_meta
from toolq import Settings
from toolq.api.app import create_app
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

EXTENSION = "io.modelcontextprotocol/tasks"
MCP_TOKENS = {
    "agent-t": {"principal": "agent", "roles": ["submitter", "viewer"]},
    "eve-t": {"principal": "eve", "roles": ["submitter", "viewer"]},
}
API_TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"]),
}


# -- the tasks extension on the client, on the SDK's seams -----------------------------------


class TaskId(types.RequestParams):
    task_id: str


class TaskUpdate(TaskId):
    input_responses: dict[str, Any]


class GetTask(types.Request[TaskId, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTask(types.Request[TaskUpdate, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTask(types.Request[TaskId, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class CreatedTask(types.Result):
    """``CreateTaskResult``."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskState(types.Result):
    """``GetTaskResult``."""

    result_type: str = "complete"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Done(types.Result):
    result_type: str | None = Field(default=None)


class Tasks(ClientExtension):
    """Resolves a task by polling ``tasks/get``; answers its input requests through the
    session's own callbacks (the elicitation callback), then ``tasks/update``."""

    identifier = EXTENSION

    def __init__(self) -> None:
        self.states: list[TaskState] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        session, answered = ctx.session, set()
        while True:
            state = await session.send_request(
                GetTask(params=TaskId(task_id=created.task_id)), TaskState
            )
            self.states.append(state)
            if state.status == "completed":
                return types.CallToolResult.model_validate(state.result)
            if state.status in ("cancelled", "failed"):
                raise RuntimeError(f"task {state.status}: {state.status_message}")
            for key, raw in (state.input_requests or {}).items():
                if key in answered:
                    continue
                request = types.ElicitRequest.model_validate(raw)
                context = ClientRequestContext(session=session, request_id=key, meta=None)
                answer = await session.dispatch_input_request(context, request)
                answered.add(key)
                dumped = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
                await session.send_request(
                    UpdateTask(
                        params=TaskUpdate(task_id=created.task_id, input_responses={key: dumped})
                    ),
                    Done,
                )
            await anyio.sleep((state.poll_interval_ms or 1000) / 1000)


# -- servers ---------------------------------------------------------------------------------


@contextmanager
def mcp_http(settings: Settings, public_url: str, *extra: str) -> Iterator[int]:
    """``toolq mcp --transport http`` in a child process, linking to ``public_url``."""
    from toolq.cli.stack import _free_port

    port = _free_port()
    params = server_params(settings, "--port", str(port), *extra)
    argv = [*params.args]
    argv[argv.index("stdio")] = "http"
    env = {
        **(params.env or {}),
        "TOOLQ_API_TOKENS": json.dumps(MCP_TOKENS),
        "TOOLQ_PUBLIC_URL": public_url,
    }
    proc = subprocess.Popen([sys.executable, *argv], env=env, cwd=ROOT)
    try:
        wait_listening(proc, port, "toolq mcp --transport http")
        yield port
    finally:
        proc.terminate()
        proc.wait(15)


def transport(port: int, token: str) -> Any:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)


@pytest.fixture
def api(inproc: InProcess, r: redis.Redis) -> Iterator[str]:
    from tests.apps import registry

    pair = Pair()
    inproc.start(approval_verify_keys=pair.verify)
    settings = make_settings(approval_signing_key=pair.signing)
    yield from serve(create_app(settings, registry, tokens=API_TOKENS))


def approve_on_the_page(url: str) -> None:
    """An approver opens the elicitation's URL on a phone, signs in and approves."""
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page(
            viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
        )
        page.goto(url)
        page.fill("#token", "alice-t")
        page.click("#login button")
        expect(page.locator("#tool")).to_have_text("wipe")
        page.locator("#approve").tap()
        expect(page.locator("#outcome")).to_contain_text("decided by alice", timeout=20_000)
        browser.close()


# -- tests -----------------------------------------------------------------------------------


def test_a_gated_call_becomes_a_task_approved_on_the_page(settings: Settings, api: str):
    extension = Tasks()
    shown: list[types.ElicitRequestURLParams] = []

    async def on_elicit(ctx: Any, params: Any) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams), params
        shown.append(params)
        await anyio.to_thread.run_sync(approve_on_the_page, params.url)
        return types.ElicitResult(action="accept")

    async def scenario(port: int) -> types.CallToolResult:
        with anyio.fail_after(60):
            async with McpClient(
                transport(port, "agent-t"), extensions=[extension], elicitation_callback=on_elicit
            ) as client:
                assert EXTENSION in (client.server_capabilities.extensions or {})
                return await client.call_tool("wipe", {"target": "db"})

    with mcp_http(settings, api) as port:
        result = anyio.run(scenario, port)
    assert not result.is_error and text_of(result) == "wiped db"
    assert toolq_meta(result)["status"] == "succeeded"
    [elicited] = shown
    call_id = toolq_meta(result)["call_id"]
    assert elicited.url == f"{api}/approve/{call_id}"
    statuses = [s.status for s in extension.states]
    assert statuses[0] == "input_required" and statuses[-1] == "completed"
    first = extension.states[0]
    assert first.task_id == call_id and set(first.input_requests or {}) == {"approval"}
    # after the client answered, the task waits for the approver, never re-asks
    assert all(not s.input_requests for s in extension.states[1:])
    decided = httpx.get(
        f"{api}/v1/approvals/{call_id}", headers={"Authorization": "Bearer alice-t"}
    )
    assert decided.json()["decided_by"] == "alice"


def test_the_client_s_answer_decides_nothing_and_cancel_cancels(settings: Settings, api: str):
    seen: dict[str, Any] = {}

    async def scenario(port: int) -> None:
        with anyio.fail_after(60):
            async with McpClient(transport(port, "agent-t"), extensions=[Tasks()]) as client:
                session = client.session
                created = await session.call_tool("wipe", {"target": "prod"}, allow_claimed=True)
                assert isinstance(created, CreatedTask), created
                task = created.task_id
                state = await session.send_request(GetTask(params=TaskId(task_id=task)), TaskState)
                assert state.status == "input_required"
                # the client "accepts" the elicitation: that approves nothing
                await session.send_request(
                    UpdateTask(
                        params=TaskUpdate(
                            task_id=task, input_responses={"approval": {"action": "accept"}}
                        )
                    ),
                    Done,
                )
                state = await session.send_request(GetTask(params=TaskId(task_id=task)), TaskState)
                assert state.status == "working" and "waiting for an approver" in (
                    state.status_message or ""
                )
                seen["working"] = httpx.get(
                    f"{api}/v1/calls/{task}", headers={"Authorization": "Bearer agent-t"}
                ).json()["status"]
                await session.send_request(CancelTask(params=TaskId(task_id=task)), Done)
                state = await session.send_request(GetTask(params=TaskId(task_id=task)), TaskState)
                seen["after"] = state.status
                seen["task"] = task

    async def stranger(port: int) -> None:
        with anyio.fail_after(30):
            async with McpClient(transport(port, "eve-t"), extensions=[Tasks()]) as client:
                from mcp.shared.exceptions import MCPError

                with pytest.raises(MCPError, match="unknown task"):
                    await client.session.send_request(
                        GetTask(params=TaskId(task_id=seen["task"])), TaskState
                    )
                with pytest.raises(MCPError, match="unknown task"):
                    await client.session.send_request(
                        CancelTask(params=TaskId(task_id=seen["task"])), Done
                    )

    with mcp_http(settings, api) as port:
        anyio.run(scenario, port)
        anyio.run(stranger, port)
    assert seen["working"] == "awaiting_approval"
    assert seen["after"] == "cancelled"
    call = httpx.get(
        f"{api}/v1/calls/{seen['task']}", headers={"Authorization": "Bearer agent-t"}
    ).json()
    assert call["status"] == "cancelled"


def test_a_client_without_the_extension_gets_today_s_answer(settings: Settings, api: str):
    async def scenario(port: int) -> types.CallToolResult:
        with anyio.fail_after(60):
            async with McpClient(transport(port, "agent-t")) as client:
                return await client.call_tool("wipe", {"target": "db"})

    with mcp_http(settings, api, "--approval-wait", "0.5") as port:
        result = anyio.run(scenario, port)
    assert result.is_error and "awaiting approval" in text_of(result)
    assert toolq_meta(result)["status"] == "awaiting_approval"
