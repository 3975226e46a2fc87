"""Tenants over HTTP: a tenant-bound token acts for its tenant only.

Each refusal is an attack performed through the API (FastAPI's ``TestClient`` over the
app and the suite's Redis): another tenant's token, holding every role but admin (or
admin, bound to its tenant), tries to dispatch into, read, decide, cancel and undo a run
of tenant ``acme``. Redis (records, the pending set, the audit stream) is the ground truth.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from tests.conftest import approve_shown
from tests.tenants.app import registry
from toolq import Settings
from toolq.api.app import create_app
from toolq.keys import Keys
from toolq.quotas import Budget, TenantConfig
from toolq.settings import ApiToken

ALL_ROLES = ["submitter", "viewer", "approver:safe", "approver:moderate", "approver:dangerous"]
TOKENS = {
    "acme-t": ApiToken(principal="ann", roles=["submitter", "viewer"], tenant="acme"),
    "acme-approver-t": ApiToken(principal="amy", roles=ALL_ROLES, tenant="acme"),
    "globex-t": ApiToken(principal="gus", roles=ALL_ROLES, tenant="globex"),
    "globex-admin-t": ApiToken(principal="gadmin", roles=["admin"], tenant="globex"),
    "root-t": ApiToken(principal="root", roles=["admin"]),
    "free-t": ApiToken(principal="fay", roles=["submitter", "viewer"]),
}
TENANTS = {
    "acme": TenantConfig(weight=2, concurrency=4, rate_limit="100/m", budget=Budget(limit=5)),
    "globex": TenantConfig(),
}


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    configured = settings.model_copy(update={"tenants": TENANTS})
    with TestClient(create_app(configured, registry, tokens=TOKENS)) as http:
        yield http


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def calls(*items: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": i, "name": n, "arguments": a} for i, n, a in items]


def openai_message(tenant: str, call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """An OpenAI assistant message with one tool call, naming ``tenant`` at its top level."""
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "tenant": tenant,
        "role": "assistant",
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def refused(response: Any, code: str = "not_owner") -> None:
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == code, response.text


@pytest.fixture
def acme_run(api: TestClient) -> dict[str, str]:
    made = api.post(
        "/v1/runs/acme-run/calls",
        headers=h("acme-t"),
        json=calls(("g1", "gated", {"target": "prod"}), ("c1", "charged", {"text": "x"})),
    )
    assert made.status_code == 202, made.text
    assert made.json()["tenant"] == "acme"
    gated, charged = (c["call_id"] for c in made.json()["calls"])
    return {"gated": gated, "charged": charged}


def test_a_bound_token_dispatches_to_its_tenant(api: TestClient, acme_run, r: redis.Redis):
    got = api.get(f"/v1/calls/{acme_run['charged']}", headers=h("acme-t")).json()
    assert got["tenant"] == "acme"
    assert r.hget(Keys().call(acme_run["charged"]), "tenant") == b"acme"
    events = api.get("/v1/runs/acme-run/events?follow=false", headers=h("acme-t")).json()
    assert {e["data"]["tenant"] for e in events} == {"acme"}


@pytest.mark.parametrize("where", ["query", "body"])
def test_a_bound_token_cannot_name_another_tenant(api: TestClient, r: redis.Redis, where: str):
    before = set(r.keys("toolq:call:*"))
    payload = openai_message("globex", "c", "free", text="x")
    if where == "query":
        response = api.post(
            "/v1/runs/r1/calls?tenant=globex",
            headers=h("acme-t"),
            json=calls(("c", "free", {"text": "x"})),
        )
    else:
        response = api.post("/v1/runs/r1/calls", headers=h("acme-t"), json=payload)
    refused(response, "wrong_tenant")
    assert "bound to tenant 'acme'" in response.json()["error"]["message"]
    assert set(r.keys("toolq:call:*")) == before
    # naming its own tenant is fine
    own = api.post(
        "/v1/runs/r1/calls?tenant=acme",
        headers=h("acme-t"),
        json=calls(("c", "free", {"text": "x"})),
    )
    assert own.status_code == 202 and own.json()["tenant"] == "acme"


def test_an_unbound_token_names_the_tenant_in_the_body(api: TestClient):
    made = api.post(
        "/v1/runs/free-run/calls",
        headers=h("free-t"),
        json=openai_message("globex", "c", "free", text="x"),
    )
    assert made.status_code == 202, made.text
    assert made.json()["tenant"] == "globex"
    assert made.json()["calls"][0]["status"] == "queued"
    call_id = made.json()["calls"][0]["call_id"]
    assert api.get(f"/v1/calls/{call_id}", headers=h("free-t")).json()["tenant"] == "globex"
    bad = api.post(
        "/v1/runs/free-run2/calls?tenant=no%20spaces",
        headers=h("free-t"),
        json=calls(("c", "free", {"text": "x"})),
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_tenant"


def test_another_tenant_cannot_dispatch_into_the_run(api: TestClient, acme_run, r: redis.Redis):
    listed_before = r.lrange(Keys().run_calls("acme-run"), 0, -1)
    for token in ("globex-t", "globex-admin-t"):
        into = api.post(
            "/v1/runs/acme-run/calls", headers=h(token), json=calls(("x", "free", {"text": "x"}))
        )
        refused(into)
        assert "belongs to another tenant" in into.json()["error"]["message"]
    # An unbound admin acting for another tenant: a run belongs to one tenant.
    refused(
        api.post(
            "/v1/runs/acme-run/calls?tenant=globex",
            headers=h("root-t"),
            json=calls(("x", "free", {"text": "x"})),
        )
    )
    assert r.lrange(Keys().run_calls("acme-run"), 0, -1) == listed_before
    # ... for the run's own tenant it may, as it may for any principal's run
    ok = api.post(
        "/v1/runs/acme-run/calls?tenant=acme",
        headers=h("root-t"),
        json=calls(("x", "free", {"text": "x"})),
    )
    assert ok.status_code == 202, ok.text


def test_another_tenant_cannot_read_the_run(api: TestClient, acme_run):
    run, gated = "acme-run", acme_run["gated"]
    for path in (
        f"/v1/runs/{run}/calls",
        f"/v1/runs/{run}/messages",
        f"/v1/runs/{run}/events?follow=false",
        f"/v1/calls/{gated}",
        f"/v1/approvals/{gated}",
        f"/v1/calls/{gated}/actions",
    ):
        for token in ("globex-t", "globex-admin-t"):
            refused(api.get(path, headers=h(token)))
        assert api.get(path, headers=h("acme-approver-t")).status_code == 200, path
        assert api.get(path, headers=h("root-t")).status_code == 200, path
    refused(api.post(f"/v1/runs/{run}/events/ticket", headers=h("globex-t")))


def test_another_tenant_cannot_decide_cancel_or_undo(api: TestClient, acme_run, r: redis.Redis):
    gated, charged = acme_run["gated"], acme_run["charged"]
    refused(api.post(f"/v1/approvals/{gated}/approve", headers=h("globex-t"), json={}))
    refused(api.post(f"/v1/approvals/{gated}/deny", headers=h("globex-t"), json={}))
    refused(api.post(f"/v1/calls/{gated}/cancel", headers=h("globex-admin-t")))
    refused(api.post(f"/v1/calls/{charged}/cancel", headers=h("globex-t")))
    refused(api.post(f"/v1/calls/{charged}/undo", headers=h("globex-t")))
    assert r.hget(Keys().call(gated), "status") == b"awaiting_approval"
    assert r.hget(Keys().call(charged), "status") == b"queued"
    audit = [e for _, e in r.xrange(Keys().audit_stream)]
    refusals = [e for e in audit if e[b"outcome"] == b"refused:not_owner"]
    # four refusals of gus, audited once per target (call) and minute
    assert sorted(e[b"call_id"].decode() for e in refusals if e[b"by"] == b"gus") == sorted(
        [gated, charged]
    )
    # the run's own tenant decides
    approved = approve_shown(api, gated, h("acme-approver-t"))
    assert approved.status_code == 200, approved.text


def test_pending_approvals_show_a_bound_viewer_its_tenant_only(api: TestClient, acme_run):
    gx = api.post(
        "/v1/runs/gx-run/calls", headers=h("globex-t"), json=calls(("g", "gated", {"target": "x"}))
    )
    gx_call = gx.json()["calls"][0]["call_id"]

    def pending(token: str) -> set[str]:
        got = api.get("/v1/approvals", headers=h(token))
        assert got.status_code == 200, got.text
        return {p["call_id"] for p in got.json()}

    listed = api.get("/v1/approvals", headers=h("root-t")).json()
    assert {p["call_id"]: p["tenant"] for p in listed} == {
        acme_run["gated"]: "acme",
        gx_call: "globex",
    }

    assert pending("acme-t") == {acme_run["gated"]}
    assert pending("globex-t") == {gx_call}
    assert pending("root-t") >= {acme_run["gated"], gx_call}


def test_the_overview_shows_a_bound_viewer_its_tenant_only(api: TestClient, acme_run):
    api.post(
        "/v1/runs/gx-run/calls", headers=h("globex-t"), json=calls(("f", "free", {"text": "x"}))
    )
    rows = api.get("/v1/overview", headers=h("acme-t")).json()["calls"]
    assert rows and {row["tenant"] for row in rows} == {"acme"}
    everyone = api.get("/v1/overview", headers=h("root-t")).json()["calls"]
    assert {row["tenant"] for row in everyone} >= {"acme", "globex"}


def test_tenants_endpoint(api: TestClient, acme_run):
    walk = api.post(
        "/v1/runs/other/calls",
        headers=h("free-t"),
        json=openai_message("walkin", "f", "free", text="x"),
    )
    assert walk.status_code == 202, walk.text
    mine = api.get("/v1/tenants", headers=h("acme-t"))
    assert mine.status_code == 200, mine.text
    (acme,) = mine.json()["tenants"]
    assert acme["tenant"] == "acme" and acme["configured"]
    assert (acme["weight"], acme["concurrency"], acme["rate_limit"]) == (2, 4, "100/60s")
    assert acme["calls"] == {"queued": 1, "awaiting_approval": 1, "running": 0, "throttled": 0}
    budget = acme["budget"]
    assert (budget["limit"], budget["used"], budget["left"], budget["per"]) == (5, 2, 3, "day")
    tools = {t["name"]: t for t in mine.json()["tools"]}
    assert tools["limited"] == {
        "name": "limited",
        "concurrency": 2,
        "rate_limit": "10/1s",
        "cost": 2.0,
        "cost_function": False,
        "use": {"slots_held": 0, "recent_starts": 0},
    }
    assert tools["printed"]["use"] is None  # no limits: nothing to use
    assert tools["printed"]["cost"] is None and tools["printed"]["cost_function"]

    refused(api.get("/v1/tenants/globex", headers=h("acme-t")), "wrong_tenant")
    assert api.get("/v1/tenants/acme", headers=h("acme-t")).json()["budget"]["used"] == 2
    everyone = api.get("/v1/tenants", headers=h("root-t")).json()["tenants"]
    by_name = {t["tenant"]: t for t in everyone}
    assert {"acme", "globex", "default", "walkin"} <= set(by_name)
    assert by_name["walkin"]["calls"]["queued"] == 1 and not by_name["walkin"]["configured"]


def test_metrics_label_named_tenants_and_count_the_rest_as_other(api: TestClient, acme_run):
    for n, tenant in enumerate(("walkin-1", "walkin-2", "walkin-3")):
        made = api.post(
            f"/v1/runs/w{n}/calls?tenant={tenant}",
            headers=h("free-t"),
            json=calls(("f", "free", {"text": "x"})),
        )
        assert made.status_code == 202, made.text
    refused(api.get("/metrics", headers=h("acme-t")), "forbidden")
    text = api.get("/metrics", headers=h("root-t")).text
    lines = set(text.splitlines())
    assert 'toolq_tenant_calls{tenant="acme",state="queued"} 1' in lines
    assert 'toolq_tenant_calls{tenant="acme",state="awaiting_approval"} 1' in lines
    assert 'toolq_tenant_calls{tenant="other",state="queued"} 3' in lines
    assert 'toolq_tenant_calls{tenant="globex",state="queued"} 0' in lines
    assert not any("walkin" in line for line in lines)
    assert 'toolq_tenant_budget_used{tenant="acme"} 2' in lines
    assert 'toolq_tenant_budget_left{tenant="acme"} 3' in lines
    assert 'toolq_tenant_weight{tenant="acme"} 2' in lines
    assert 'toolq_tenant_rate_limit_per_second{tenant="acme"} 1.66667' in lines
    assert 'toolq_tool_concurrency_limit{tool="limited"} 2' in lines
    assert 'toolq_tool_cost{tool="charged"} 1' in lines
    labels = {line.split('tenant="')[1].split('"')[0] for line in lines if 'tenant="' in line}
    assert labels == {"acme", "globex", "default", "other"}
