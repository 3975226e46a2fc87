"""Signed approvals over the real HTTP API (quorum, edit by the second approver), and the
local stack giving its workers verify keys."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.approvals.conftest import executions, start_verifying
from tests.conftest import approve_shown, make_settings, serve
from toolq.api.app import create_app
from toolq.cli.check import live_workers
from toolq.cli.stack import Stack
from toolq.settings import ApiToken, Settings

pytestmark = pytest.mark.e2e

TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"]),
    "bob-t": ApiToken(principal="bob", roles=["viewer", "approver:dangerous"]),
}


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_quorum_over_http_runs_only_what_both_approved(pair, inproc, r):
    from tests.apps import registry

    start_verifying(inproc, pair.verify, dangerous_approvals=2)
    settings = make_settings(approval_signing_key=pair.signing, dangerous_approvals=2)
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        sent = httpx.post(
            f"{api}/v1/runs/http-q/calls",
            json=[{"id": "h1", "name": "wipe", "arguments": {"target": "staging"}}],
            headers=h("agent-t"),
        ).json()
        call_id = sent["calls"][0]["call_id"]
        approve = f"{api}/v1/approvals/{call_id}/approve"
        assert approve_shown(api, call_id, h("alice-t")).status_code == 200
        edited = approve_shown(api, call_id, h("bob-t"), arguments={"target": "PRODUCTION"})
        assert edited.status_code == 200 and edited.json()["status"] == "awaiting_approval"
        shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("alice-t")).json()
        assert shown["approvals"] == ["bob"] and shown["arguments"] == {"target": "PRODUCTION"}
        stale = httpx.post(approve, json={"digest": "0" * 64}, headers=h("alice-t"))
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "digest_mismatch"
        done = httpx.post(approve, json={"digest": shown["digest"]}, headers=h("alice-t"))
        assert done.status_code == 200
        deadline = time.monotonic() + 30
        while True:
            result = httpx.get(f"{api}/v1/calls/{call_id}", headers=h("agent-t")).json()
            if result["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert result["status"] == "succeeded", result
        assert result["output"] == "wiped PRODUCTION"
        assert executions(r, call_id) == 1


def test_local_stack_workers_verify_and_only_the_api_signs(r):
    stack = Stack.start("tests.apps:registry", concurrency=1)  # its own embedded Redis
    try:
        stack.wait_ready()
        assert stack.signing_key and stack.verify_keys
        heartbeats = live_workers(Settings(redis_url=stack.redis_url))
        assert len(heartbeats) == 3
        assert all(w["verifies_approvals"] for w in heartbeats)
    finally:
        stack.stop()
