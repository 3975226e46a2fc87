"""``toolq dispatch --tenant``, ``toolq tenants``, ``toolq mcp --tenant``."""

from __future__ import annotations

import json

import anyio
import pytest
import redis
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.cli.test_cli import toolq
from tests.conftest import InProcess
from tests.e2e.test_mcp import McpClient, server_params
from toolq import Settings
from toolq.api.auth import Authenticator
from toolq.api.mcp import RequireSubmitter
from toolq.keys import Keys
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

APP = "tests.tenants.app:registry"
TENANTS = json.dumps({"acme": {"budget": {"limit": 1, "per": "month"}, "weight": 3}})


def one(call_id: str, name: str = "charged") -> str:
    return json.dumps([{"id": call_id, "name": name, "arguments": {"text": "x"}}])


def test_dispatch_and_tenants_on_the_command_line(settings: Settings) -> None:
    env = {"TOOLQ_TENANTS": TENANTS}
    first = toolq(
        "dispatch", "--app", APP, "--tenant", "acme", settings=settings, stdin=one("a"), **env
    )
    assert first.returncode == 0, first.stderr
    (call,) = json.loads(first.stdout)["calls"]
    assert (call["status"], call["tenant"]) == ("queued", "acme")
    second = toolq(
        "dispatch", "--app", APP, "--tenant", "acme", settings=settings, stdin=one("b"), **env
    )
    (denied,) = json.loads(second.stdout)["calls"]
    assert (denied["status"], denied["error_type"]) == ("denied", "budget_exceeded")

    listed = toolq("tenants", "--app", APP, "--json", settings=settings, **env)
    assert listed.returncode == 0, listed.stderr
    by_name = {t["tenant"]: t for t in json.loads(listed.stdout)["tenants"]}
    assert by_name["acme"]["budget"]["used"] == 1 and by_name["acme"]["budget"]["left"] == 0
    assert by_name["acme"]["calls"]["queued"] == 1 and by_name["acme"]["weight"] == 3

    table = toolq("tenants", "--app", APP, settings=settings, **env)
    assert table.returncode == 0, table.stderr
    acme_line = next(line for line in table.stdout.splitlines() if line.startswith("acme "))
    assert acme_line.split()[:7] == ["acme", "3", "-", "-", "1/month", "1", "0"]
    assert any(
        line.split()[:6] == ["printed", "-", "-", "-", "-", "f(args)"]
        for line in table.stdout.splitlines()
    )

    bad = toolq(
        "dispatch", "--app", APP, "--tenant", "no spaces", settings=settings, stdin=one("c")
    )
    assert bad.returncode == 1 and "tenant 'no spaces'" in bad.stderr


def test_mcp_calls_are_run_for_its_tenant(settings: Settings, inproc: InProcess) -> None:
    inproc.start("safe,dangerous", app=APP)
    params = server_params(settings, "--tenant", "acme")
    params.args[params.args.index("tests.apps:registry")] = APP
    params.env = {**(params.env or {}), "TOOLQ_APP": APP}

    async def main() -> None:
        with anyio.fail_after(60):
            async with McpClient(params) as session:
                done = await session.call_tool("free", {"text": "hi"})
                assert not done.is_error

    anyio.run(main)
    r = redis.Redis.from_url(settings.redis_url)
    tenants = {r.hget(key, "tenant") for key in r.keys(Keys().call("*"))}
    assert tenants == {b"acme"}


def test_mcp_over_http_refuses_a_token_of_another_tenant() -> None:
    tokens = {
        "acme-t": ApiToken(principal="a", roles=["submitter"], tenant="acme"),
        "globex-t": ApiToken(principal="g", roles=["submitter"], tenant="globex"),
        "free-t": ApiToken(principal="f", roles=["submitter"]),
    }
    inner = Starlette(routes=[Route("/mcp", lambda request: PlainTextResponse("ok"))])
    app = RequireSubmitter(inner, Authenticator(tokens), "acme")
    with TestClient(app) as http:
        for token, status in (("acme-t", 200), ("free-t", 200), ("globex-t", 403)):
            got = http.get("/mcp", headers={"Authorization": f"Bearer {token}"})
            assert got.status_code == status, (token, got.text)
        refused = http.get("/mcp", headers={"Authorization": "Bearer globex-t"})
        assert refused.json()["error"]["code"] == "wrong_tenant"
