"""MCP over HTTP submits each call as its token's principal, so no one approves their own call.

The attack: a token holding both ``submitter`` and ``approver:dangerous`` submits a dangerous
call through the real ``toolq mcp --transport http`` server, then approves it through the
real HTTP API. The same call dispatched through the API is refused as self-approval; before,
the MCP server recorded every call under its fixed ``--principal`` (``mcp``), and the
approval went through.
"""

from __future__ import annotations

import anyio
import httpx
import pytest
import redis

from tests.conftest import InProcess, approve_shown, serve
from tests.e2e.test_mcp import http_server, http_session, text_of, toolq_meta
from toolq import Client, Settings
from toolq.api.app import create_app
from toolq.results.owners import RunOwner
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

TOKENS = {
    "mallory-t": {"principal": "mallory", "roles": ["submitter", "viewer", "approver:dangerous"]},
    "alice-t": {"principal": "alice", "roles": ["viewer", "approver:dangerous"]},
}


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_call_submitted_over_mcp_http_is_its_token_s_and_not_self_approvable(
    settings: Settings, inproc: InProcess, r: redis.Redis, client: Client
) -> None:
    from tests.apps import registry

    inproc.start()
    parked: dict[str, str] = {}

    async def submit(port: int) -> None:
        with anyio.fail_after(30):
            async with http_session(port, "mallory-t") as session:
                result = await session.call_tool("wipe", {"target": "prod"})
                assert result.is_error and "awaiting approval" in text_of(result)
                parked.update(toolq_meta(result))

    with http_server(settings, TOKENS, "--approval-wait", "0.5") as port:
        anyio.run(submit, port)
    call_id, run_id = parked["call_id"], parked["run_id"]
    envelope = client.store.envelope(call_id)
    assert (envelope.principal, envelope.tenant) == ("mallory", "default")
    assert client.owners.get(run_id) == RunOwner.of("mallory", "default")

    tokens = {token: ApiToken.model_validate(grant) for token, grant in TOKENS.items()}
    for api in serve(create_app(settings, registry, tokens=tokens)):
        own = approve_shown(api, call_id, h("mallory-t"))
        assert own.status_code == 403, own.text
        assert own.json()["error"]["code"] == "not_authorized"
        assert "self approval" in own.json()["error"]["message"]
        # Exactly as for the same call dispatched through the HTTP API.
        sent = httpx.post(
            f"{api}/v1/runs/by-api/calls",
            headers=h("mallory-t"),
            json=[{"id": "w1", "name": "wipe", "arguments": {"target": "prod"}}],
        )
        twin = sent.json()["calls"][0]["call_id"]
        same = approve_shown(api, twin, h("mallory-t"))
        assert (same.status_code, same.json()["error"]["message"]) == (
            403,
            own.json()["error"]["message"].replace(call_id, twin),
        )
        assert r.hget(f"toolq:call:{call_id}", "status") == b"awaiting_approval"
        # Someone else may approve it, and it runs.
        other = approve_shown(api, call_id, h("alice-t"))
        assert other.status_code == 200, other.text
    [result] = client.wait([call_id], timeout=30)
    assert result.output == "wiped prod"


def test_over_one_fixed_run_another_token_never_reattaches_to_a_parked_call(
    settings: Settings, inproc: InProcess, client: Client
) -> None:
    inproc.start()
    tokens = {**TOKENS, "bob-t": {"principal": "bob", "roles": ["submitter"]}}
    seen: dict[str, object] = {}

    async def call_as(port: int, token: str) -> None:
        with anyio.fail_after(30):
            async with http_session(port, token) as session:
                result = await session.call_tool("wipe", {"target": "prod"})
                seen[token] = (result.is_error, text_of(result), result.meta)

    with http_server(settings, tokens, "--approval-wait", "0.5", "--run-id", "shared") as port:
        anyio.run(call_as, port, "mallory-t")
        anyio.run(call_as, port, "bob-t")
    mallory_error, _, meta = seen["mallory-t"]
    assert mallory_error and meta is not None
    call_id = meta["toolq"]["call_id"]
    bob_error, bob_text, bob_meta = seen["bob-t"]
    # The run is mallory's: bob's call is refused, and he is not handed mallory's call.
    assert bob_error and bob_text.startswith("not_owner: 'bob' may not dispatch"), bob_text
    assert call_id not in bob_text and (bob_meta is None or "toolq" not in bob_meta)
    assert client.store.envelope(call_id).principal == "mallory"
