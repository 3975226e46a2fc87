"""Attacks on tenant isolation and budgets, each performed for real.

A token bound to tenant ``acme`` tries to learn about or read tenant ``globex``'s calls
through the HTTP API (a real uvicorn where a stream is involved); budgets are attacked
through the ``Client`` with racing dispatches and hostile arguments; tenant names that
look like others are tried everywhere a name is taken. Redis is the ground truth.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tests.conftest import approve_shown, serve
from tests.tenants.app import registry
from toolq import Client, Settings, ToolRegistry
from toolq.api.app import create_app
from toolq.dispatch.budgets import period_of
from toolq.errors import ConfigurationError, CostError, InvalidTenantError
from toolq.keys import Keys
from toolq.models import CallStatus, RiskLevel
from toolq.quotas import Budget, TenantConfig
from toolq.settings import ApiToken
from toolq.workers.health import seen_entry

TOKENS = {
    "acme-t": ApiToken(principal="ann", roles=["submitter", "viewer"], tenant="acme"),
    "acme-approver-t": ApiToken(
        principal="amy", roles=["viewer", "approver:dangerous"], tenant="acme"
    ),
    "globex-t": ApiToken(principal="gus", roles=["submitter", "viewer"], tenant="globex"),
    "free-t": ApiToken(principal="fay", roles=["submitter", "viewer"]),
    "root-t": ApiToken(principal="root", roles=["admin"]),
}
ACME_BUDGET = Budget(limit=5, per="day")
TENANTS = {"acme": TenantConfig(budget=ACME_BUDGET), "globex": TenantConfig()}


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def one(name: str, call_id: str, **arguments: Any) -> list[dict[str, Any]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


@pytest.fixture
def configured(settings: Settings) -> Settings:
    return settings.model_copy(update={"tenants": TENANTS})


@pytest.fixture
def api(configured: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(configured, registry, tokens=TOKENS)) as http:
        yield http


def dispatch(api: TestClient, token: str, run: str, items: list[dict[str, Any]]) -> list[str]:
    made = api.post(f"/v1/runs/{run}/calls", headers=h(token), json=items)
    assert made.status_code == 202, made.text
    return [c["call_id"] for c in made.json()["calls"]]


# -- reading another tenant -----------------------------------------------------------------


def _read_stream(url: str, token: str, registered: threading.Event, lines: list[str]) -> None:
    """Collect the stream's lines until it ends or carries one event."""
    with httpx.stream("GET", url, headers=h(token), timeout=30) as response:
        lines.append(f"status: {response.status_code}")
        for line in response.iter_lines():
            lines.append(line)
            if line.startswith("retry: "):
                registered.set()
            if line.startswith("data: "):
                return
    registered.set()


def test_a_stream_opened_before_the_run_exists_gets_no_event_of_another_tenant(
    configured: Settings, r: redis.Redis
) -> None:
    """acme subscribes to a run id globex will use; globex's events must not reach it."""
    app = create_app(configured, registry, tokens=TOKENS)
    for base in serve(app):
        streams = {}
        for run, token in (("future", "acme-t"), ("own-future", "acme-t")):
            registered, lines = threading.Event(), []
            reader = threading.Thread(
                target=_read_stream,
                args=(f"{base}/v1/runs/{run}/events", token, registered, lines),
                daemon=True,
            )
            reader.start()
            assert registered.wait(20)
            streams[run] = (reader, lines)
        with httpx.Client(base_url=base, timeout=20) as http:
            theirs = http.post(
                "/v1/runs/future/calls",
                headers=h("globex-t"),
                json=one("free", "g", text="globex-secret"),
            )
            assert theirs.status_code == 202, theirs.text
            mine = http.post(
                "/v1/runs/own-future/calls",
                headers=h("acme-t"),
                json=one("free", "a", text="acme-own"),
            )
            assert mine.status_code == 202, mine.text
        for reader, _ in streams.values():
            reader.join(20)
            assert not reader.is_alive()
        leaked = streams["future"][1]
        assert not any("globex-secret" in line for line in leaked), leaked
        assert not any(line.startswith("data: ") for line in leaked), leaked
        assert any("acme-own" in line for line in streams["own-future"][1])
    refusals = [e for _, e in r.xrange(Keys().audit_stream)]
    assert any(e[b"run_id"] == b"future" and e[b"by"] == b"ann" for e in refusals)


def test_the_overview_counts_a_bound_viewers_tenant_only(
    api: TestClient, r: redis.Redis, configured: Settings
) -> None:
    """Pending approvals, queue depth and workers' current calls of globex stay hidden."""
    parked = dispatch(api, "globex-t", "gx", one("gated", "g1", target="prod"))
    queued = dispatch(api, "globex-t", "gx", one("free", "f1", text="x"))
    keys = Keys(configured.key_prefix)
    heartbeat = {
        "hostname": "w1@host",
        "queues": [keys.queue_for(RiskLevel.SAFE)],
        "current": queued + parked,
        "processed": 9876,
    }
    # a worker's heartbeat, running globex's queued call, as beat() writes it
    r.set(keys.worker("w1@host"), json.dumps(heartbeat), ex=60)
    r.hset(keys.workers_seen, "w1@host", seen_entry(heartbeat, 60, time.time()))
    seen = api.get("/v1/overview", headers=h("acme-t"))
    assert seen.status_code == 200, seen.text
    body = seen.json()
    assert body["pending_approvals"] == 0
    assert body["queues"] == {"safe": 0, "moderate": 0, "dangerous": 0}
    assert body["calls"] == []
    assert all(not w["current"] for w in body["worker_list"]), body["worker_list"]
    # how many calls the fleet ran, every tenant's, is not a bound viewer's to see
    assert all(w["processed"] is None for w in body["worker_list"]), body["worker_list"]
    # the tenant's own figures are there
    mine = dispatch(api, "acme-t", "ac", one("gated", "a1", target="x"))
    body = api.get("/v1/overview", headers=h("acme-t")).json()
    assert body["pending_approvals"] == 1 and [c["call_id"] for c in body["calls"]] == mine
    # an unbound viewer sees the fleet
    everything = api.get("/v1/overview", headers=h("free-t")).json()
    assert everything["pending_approvals"] == 2
    assert everything["queues"]["safe"] >= 1
    # the panel lists what runs: a heartbeat names every call of the messages it runs
    assert {c for w in everything["worker_list"] for c in w["current"]} == set()
    r.hset(keys.call(queued[0]), "status", "running")
    everything = api.get("/v1/overview", headers=h("free-t")).json()
    assert {c for w in everything["worker_list"] for c in w["current"]} == {queued[0]}
    bound = api.get("/v1/overview", headers=h("acme-t")).json()  # globex's running call: hidden
    assert all(not w["current"] for w in bound["worker_list"]), bound["worker_list"]
    assert [w["processed"] for w in everything["worker_list"]] == [9876]


def test_a_bound_viewers_overview_reads_a_bounded_number_of_calls(
    api: TestClient, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its parked count comes from its own index and its queued count says when it is capped."""
    from toolq.api import dashboard

    for n in range(3):
        dispatch(api, "acme-t", f"q{n}", one("free", f"f{n}", text="x"))
    dispatch(api, "acme-t", "p", one("gated", "g1", target="x") + one("gated", "g2", target="y"))
    dispatch(api, "globex-t", "gp", one("gated", "g1", target="x"))
    body = api.get("/v1/overview", headers=h("acme-t")).json()
    assert body["pending_approvals"] == 2 and body["queues_capped"] is False
    assert body["queues"]["safe"] == 3, body["queues"]
    reads: list[int] = []
    real_hmget = redis.client.Pipeline.hmget

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return real_hmget(self, *args, **kwargs)

    monkeypatch.setattr(dashboard, "QUEUED_READ", 1)
    monkeypatch.setattr(redis.client.Pipeline, "hmget", counted)
    body = api.get("/v1/overview", params={"limit": 1}, headers=h("acme-t")).json()
    assert body["queues_capped"] is True and body["queues"]["safe"] == 2, body["queues"]
    assert body["pending_approvals"] == 2
    # one queued id, and the overview's page of recent calls (one chunk): never the parked
    assert len(reads) <= 1 + 5 + 1, len(reads)


def test_the_charts_show_a_bound_viewer_its_tenant_only(api: TestClient) -> None:
    dispatch(api, "globex-t", "gx", one("free", "f1", text="x") + one("free", "f2", text="y"))
    assert api.get("/v1/charts", headers=h("acme-t")).json()["rates"] == {}
    assert sum(api.get("/v1/charts", headers=h("free-t")).json()["rates"]["queued"]) > 0
    dispatch(api, "acme-t", "ac", one("free", "a1", text="x"))
    rates = api.get("/v1/charts", headers=h("acme-t")).json()["rates"]
    assert sum(rates["queued"]) == round(1 / 60, 4)


def test_a_foreign_call_id_is_refused_on_every_endpoint_and_unknown_ids_stay_404(
    api: TestClient,
) -> None:
    """Held: the refusal names the caller's own input only; unknown ids are a 404."""
    (theirs,) = dispatch(api, "globex-t", "gx", one("gated", "g1", target="prod"))
    for method, path in (
        ("GET", f"/v1/calls/{theirs}"),
        ("GET", f"/v1/approvals/{theirs}"),
        ("GET", f"/v1/calls/{theirs}/actions"),
        ("POST", f"/v1/approvals/{theirs}/approve"),
        ("POST", f"/v1/approvals/{theirs}/deny"),
        ("POST", f"/v1/calls/{theirs}/cancel"),
        ("POST", f"/v1/calls/{theirs}/undo"),
    ):
        refused = api.request(method, path, headers=h("acme-approver-t"), json={})
        assert refused.status_code == 403, (path, refused.text)
        assert "prod" not in refused.text and "gus" not in refused.text
    unknown = api.get("/v1/calls/nope", headers=h("acme-t"))
    assert unknown.status_code == 404
    refused = api.get("/v1/tenants/globex", headers=h("acme-t"))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "wrong_tenant"
    (mine,) = api.get("/v1/tenants", headers=h("acme-t")).json()["tenants"]
    assert mine["tenant"] == "acme"
    health = api.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] in ("ok", "degraded")


# -- tenant names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["acme\n", "acme ", "*", "\uff41cme", "acmé", "a" * 65])
def test_a_name_that_only_looks_like_a_tenant_is_refused(
    api: TestClient, configured: Settings, name: str
) -> None:
    with Client(registry, configured) as client, pytest.raises(InvalidTenantError):
        client.dispatch(one("free", "f", text="x"), tenant=name)
    made = api.post(
        "/v1/runs/r/calls",
        params={"tenant": name},
        headers=h("free-t"),
        json=one("free", "f", text="x"),
    )
    assert made.status_code == 400 and made.json()["error"]["code"] == "invalid_tenant"
    detail = api.get(f"/v1/tenants/{quote(name, safe='')}", headers=h("free-t"))
    assert detail.status_code in (400, 404), detail.text
    with pytest.raises(ValidationError):
        ApiToken(principal="p", roles=["viewer"], tenant=name)


def test_the_metrics_bucket_other_cannot_be_configured_as_a_tenant(settings: Settings) -> None:
    with pytest.raises(ValidationError, match="other"):
        Settings(tenants={"other": TenantConfig(weight=2)})


# -- budgets --------------------------------------------------------------------------------

hostile = ToolRegistry()


@hostile.tool(cost=lambda pages: pages)
def per_page(pages: int) -> int:
    """Costs one unit per page, whatever the caller says the pages are."""
    return pages


@hostile.tool(cost=1)
def flat(text: str) -> str:
    """Costs 1."""
    return text


@hostile.tool(cost=lambda pages: pages, risk=RiskLevel.DANGEROUS)
def print_pages(pages: int) -> int:
    """Costs one unit per page and needs an approval."""
    return pages


def spent(client: Client, tenant: str = "acme", budget: Budget = ACME_BUDGET) -> float:
    raw = client.redis.get(
        Keys(client.settings.key_prefix).tenant_spent(tenant, period_of(budget, time.time()).name)
    )
    return float(raw) if raw else 0.0


def test_racing_dispatches_never_spend_past_the_budget(configured: Settings) -> None:
    """Held: 40 single-call dispatches at once against a budget of 5 queue exactly 5."""
    with Client(hostile, configured) as client:

        def fire(n: int) -> CallStatus:
            batch = client.dispatch(
                one("flat", f"c{n}", text="x"), run_id=f"race-{n}", tenant="acme"
            )
            return batch.calls[0].status

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(fire, range(40)))
        assert statuses.count(CallStatus.QUEUED) == 5
        assert statuses.count(CallStatus.DENIED) == 35
        assert spent(client) == 5


@pytest.mark.parametrize(
    ("pages", "error_type"),
    [(10**400, CostError.code), (-1, CostError.code), (0.5, "invalid_arguments")],
)
def test_a_hostile_argument_fails_its_own_call_only(
    configured: Settings, pages: Any, error_type: str
) -> None:
    """A cost function fed a huge int (no float holds it), a negative or a fraction."""
    with Client(hostile, configured) as client:
        batch = client.dispatch(
            [
                {"id": "bad", "name": "per_page", "arguments": {"pages": pages}},
                {"id": "ok", "name": "flat", "arguments": {"text": "x"}},
            ],
            tenant="acme",
        )
        bad, ok = (client.result(c.call_id) for c in batch.calls)
        assert bad.status is CallStatus.FAILED
        assert bad.error_type == error_type, bad.error
        assert ok.status is CallStatus.QUEUED
        assert spent(client) == 1


def test_a_huge_cost_is_denied_and_charges_nothing(configured: Settings) -> None:
    with Client(hostile, configured) as client:
        batch = client.dispatch(one("per_page", "p", pages=10**300), tenant="acme")
        assert batch.calls[0].status is CallStatus.DENIED
        assert client.result(batch.calls[0].call_id).error_type == "budget_exceeded"
        assert spent(client) == 0


@pytest.mark.parametrize(
    "cost",
    [float("nan"), float("inf"), -1, True],
)
def test_a_tool_cannot_be_priced_at_nan_inf_negative_or_bool(cost: Any) -> None:
    with pytest.raises(ConfigurationError, match="cost"):
        ToolRegistry().tool(cost=cost)(lambda text: text)


@pytest.mark.parametrize("limit", [float("inf"), float("nan"), -1])
def test_a_budget_limit_must_be_a_finite_number(limit: float) -> None:
    with pytest.raises(ValidationError):
        Budget(limit=limit)


def test_a_call_denied_for_budget_cannot_be_approved_or_resent(
    api: TestClient, r: redis.Redis
) -> None:
    """Held: the approval API and the sweeper's sets never see a call denied for budget."""
    for n in range(5):
        dispatch(api, "acme-t", "b", one("charged", f"c{n}", text="x"))
    (over,) = dispatch(api, "acme-t", "b", one("gated", "g", target="x"))
    record = r.hgetall(Keys().call(over))
    assert record[b"status"] == b"denied"
    approve = approve_shown(api, over, h("acme-approver-t"))
    assert approve.status_code == 409, approve.text
    assert r.hget(Keys().call(over), "status") == b"denied"
    assert r.zscore(Keys().pending_approvals, over) is None
    assert r.zscore(Keys().unsent, over) is None and r.zscore(Keys().queued, over) is None
    assert api.get("/v1/approvals", headers=h("acme-approver-t")).json() == []


def test_an_approver_cannot_edit_a_call_into_costing_more_than_it_was_charged(
    configured: Settings, r: redis.Redis
) -> None:
    """The charge is made at dispatch: an edit raising the cost would spend past the budget."""
    with Client(hostile, configured) as client:
        batch = client.dispatch(
            [
                {"id": "p1", "name": "print_pages", "arguments": {"pages": 2}},
                {"id": "p2", "name": "print_pages", "arguments": {"pages": 2}},
            ],
            tenant="acme",
        )
        first, second = (c.call_id for c in batch.calls)
        assert spent(client) == 4
        with pytest.raises(CostError, match="charged 2"):
            client.approvals.approve(first, "amy", arguments={"pages": 1000})
        assert r.hget(Keys().call(first), "status") == b"awaiting_approval"
        assert client.approvals.get(first).arguments == {"pages": 2}
        audit = [e for _, e in r.xrange(Keys().audit_stream)]
        assert any(e[b"outcome"] == f"refused:{CostError.code}".encode() for e in audit)
        # an edit that costs the same or less, or no edit, is approved as before
        assert client.approvals.approve(first, "amy", arguments={"pages": 1}).status in (
            CallStatus.QUEUED,
            CallStatus.RUNNING,
        )
        assert client.approvals.approve(second, "amy").status is not CallStatus.AWAITING_APPROVAL
        assert spent(client) == 4


@hostile.tool(cost=0.1)
def tenth(text: str) -> str:
    """Costs 0.1: sums of tenths are not exact in binary floating point."""
    return text


@pytest.mark.parametrize(("limit", "accepted"), [(0.3, 3), (1.0, 10), (0.7, 7)])
def test_float_rounding_neither_denies_a_call_within_budget_nor_lets_one_past_it(
    settings: Settings, limit: float, accepted: int
) -> None:
    budget = Budget(limit=limit, per="day")
    tenants = {"acme": TenantConfig(budget=budget)}
    with Client(hostile, settings.model_copy(update={"tenants": tenants})) as client:
        statuses = [
            client.dispatch(one("tenth", f"t{n}", text="x"), tenant="acme").calls[0].status
            for n in range(accepted + 2)
        ]
        assert statuses == [CallStatus.QUEUED] * accepted + [CallStatus.DENIED] * 2
        assert spent(client, budget=budget) == pytest.approx(limit)


def test_a_ticket_taken_before_the_run_exists_opens_nothing_of_another_tenant(
    api: TestClient,
) -> None:
    """Held: a ticket carries its holder's tenant, checked again when it is redeemed."""
    issued = api.post("/v1/runs/later/events/ticket", headers=h("acme-t"))
    assert issued.status_code == 200, issued.text
    dispatch(api, "globex-t", "later", one("free", "g", text="globex-secret"))
    backlog = api.get(
        "/v1/runs/later/events", params={"ticket": issued.json()["ticket"], "follow": "false"}
    )
    assert backlog.status_code == 403 and "globex-secret" not in backlog.text
    listed = api.get("/v1/overview", params={"run_id": "later"}, headers=h("acme-t"))
    assert listed.json()["calls"] == []


def test_idempotency_keys_and_call_ids_of_another_tenant_reveal_nothing(api: TestClient) -> None:
    """Held: a dispatch into another tenant's run with its key and call id is refused
    before the key is looked up; in one's own run the same key and id make a new call."""
    key = {"Idempotency-Key": "k-1"}
    (theirs,) = dispatch(api, "globex-t", "gx", one("free", "c1", text="x"))
    made = api.post(
        "/v1/runs/gx/calls", headers={**h("globex-t"), **key}, json=one("free", "c2", text="x")
    )
    their_keyed = made.json()["calls"][0]["call_id"]
    for token, query in (("acme-t", ""), ("free-t", "?tenant=acme")):
        for extra in ({}, key):
            into = api.post(
                f"/v1/runs/gx/calls{query}",
                headers={**h(token), **extra},
                json=one("free", "c1", text="x") + one("free", "c2", text="x"),
            )
            assert into.status_code == 403, into.text
            assert theirs not in into.text and their_keyed not in into.text
    own = api.post(
        "/v1/runs/ac/calls", headers={**h("acme-t"), **key}, json=one("free", "c1", text="x")
    )
    (call,) = own.json()["calls"]
    assert not call["duplicate"] and call["call_id"] not in (theirs, their_keyed)
