"""Budgets: a call's cost is charged with its creation; over budget, it is denied.

Calls run on an in-process worker over the suite's Redis; the spent counter in Redis and
the calls' final states are the ground truth.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.conftest import InProcess
from tests.tenants.app import registry
from toolq import Client, Settings
from toolq.dispatch.budgets import period_of
from toolq.errors import BudgetExceededError, CostError, InvalidTenantError
from toolq.keys import Keys
from toolq.models import CallStatus, EventType
from toolq.quotas import Budget, TenantConfig

APP = "tests.tenants.app:registry"
BUDGET = Budget(limit=2, per="day")


@pytest.fixture
def budgeted(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "tenants": {
                "acme": TenantConfig(budget=BUDGET),
                "*": TenantConfig(budget=Budget(limit=100, per="month")),
            }
        }
    )


@pytest.fixture
def client(budgeted: Settings) -> Iterator[Client]:
    with Client(registry, budgeted) as c:
        yield c


def one(name: str, call_id: str, **arguments: object) -> list[dict[str, object]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


def spent(client: Client, tenant: str, budget: Budget = BUDGET) -> float:
    raw = client.redis.get(
        Keys(client.settings.key_prefix).tenant_spent(tenant, period_of(budget, time.time()).name)
    )
    return float(raw) if raw else 0.0


def test_a_budget_of_2_with_cost_1_denies_the_third_call(client: Client, inproc: InProcess) -> None:
    worker = inproc.worker(app=APP)
    results = []
    for n in range(3):
        batch = client.dispatch(one("charged", f"c{n}", text=str(n)), tenant="acme")
        worker.drain()
        results.append(batch.wait(5)[0])
    assert [r.status for r in results] == [
        CallStatus.SUCCEEDED,
        CallStatus.SUCCEEDED,
        CallStatus.DENIED,
    ]
    denied = results[2]
    assert denied.error_type == BudgetExceededError.code
    assert "has 0 left of its budget of 2 per day" in (denied.error or "")
    assert "resets at" in (denied.error or "")
    assert denied.tenant == "acme"
    assert spent(client, "acme") == 2
    events = client.log.read(denied.run_id or "")
    assert [e.type for e in events] == [EventType.DENIED]
    assert events[0].data["error_type"] == BudgetExceededError.code
    assert events[0].data["tenant"] == "acme"


def test_a_retried_dispatch_is_not_charged_again(client: Client) -> None:
    first = client.dispatch(one("charged", "c1", text="x"), run_id="r-retry", tenant="acme")
    again = client.dispatch(one("charged", "c1", text="x"), run_id="r-retry", tenant="acme")
    assert again.calls[0].duplicate and again.calls[0].call_id == first.calls[0].call_id
    assert spent(client, "acme") == 1
    # the budget still has room for exactly one more call
    assert client.dispatch(one("charged", "c2", text="y"), tenant="acme").calls[0].status is (
        CallStatus.QUEUED
    )
    assert client.dispatch(one("charged", "c3", text="z"), tenant="acme").calls[0].status is (
        CallStatus.DENIED
    )
    assert spent(client, "acme") == 2


def test_the_charge_comes_before_parking(client: Client) -> None:
    parked = client.dispatch(one("gated", "g1", target="a"), tenant="acme")
    assert parked.calls[0].status is CallStatus.AWAITING_APPROVAL
    client.dispatch(one("charged", "c1", text="x"), tenant="acme")
    over = client.dispatch(one("gated", "g2", target="b"), tenant="acme")
    assert over.calls[0].status is CallStatus.DENIED  # no approver is asked
    pending = [p.call_id for p in client.approvals.pending()]
    assert parked.calls[0].call_id in pending and over.calls[0].call_id not in pending


def test_a_cost_function_of_the_arguments(client: Client) -> None:
    within = client.dispatch(one("printed", "p1", pages=4), tenant="acme")  # costs 2
    assert within.calls[0].status is CallStatus.QUEUED
    over = client.dispatch(one("printed", "p2", pages=1), tenant="acme")  # 0.5 > 0 left
    assert over.calls[0].status is CallStatus.DENIED
    assert spent(client, "acme") == 2


def test_a_failing_cost_function_fails_its_call_only(client: Client) -> None:
    batch = client.dispatch(
        [
            {"id": "a", "name": "unpriced", "arguments": {"text": "x"}},
            {"id": "b", "name": "mispriced", "arguments": {"text": "x"}},
            {"id": "c", "name": "charged", "arguments": {"text": "x"}},
        ],
        tenant="acme",
    )
    assert [c.status for c in batch.calls] == [
        CallStatus.FAILED,
        CallStatus.FAILED,
        CallStatus.QUEUED,
    ]
    unpriced, mispriced, _ = client.store.results([c.call_id for c in batch.calls])
    assert unpriced.error_type == mispriced.error_type == CostError.code
    assert "price list unavailable" in (unpriced.error or "")
    assert "'a lot', not a number" in (mispriced.error or "")
    assert spent(client, "acme") == 1


def test_tenants_have_budgets_of_their_own(client: Client) -> None:
    for n in range(3):
        client.dispatch(one("charged", f"o{n}", text="x"), tenant="other")
    assert spent(client, "acme") == 0
    assert spent(client, "other", Budget(limit=100, per="month")) == 3
    assert client.dispatch(one("free", "f", text="x"), tenant="acme").calls[0].status is (
        CallStatus.QUEUED
    )


def test_a_denied_call_over_budget_keeps_its_secrets_masked(client: Client) -> None:
    client.dispatch(one("charged", "c1", text="x"), tenant="acme")
    client.dispatch(one("charged", "c2", text="x"), tenant="acme")
    batch = client.dispatch(one("sealed", "s", token="hunter2-secret"), tenant="acme")
    assert batch.calls[0].status is CallStatus.DENIED
    raw = client.redis.hget(
        Keys(client.settings.key_prefix).call(batch.calls[0].call_id), "envelope"
    )
    assert b"hunter2" not in raw and b"toolq_secret" not in raw


@pytest.mark.parametrize("tenant", ["", "a b", "-x", "x" * 65, "a/b"])
def test_an_invalid_tenant_is_refused(client: Client, tenant: str) -> None:
    with pytest.raises(InvalidTenantError) as info:
        client.dispatch(one("free", "f", text="x"), tenant=tenant)
    assert info.value.code == "invalid_tenant"


def test_the_async_client_dispatches_for_a_tenant(budgeted: Settings) -> None:
    import asyncio

    from toolq import AsyncClient

    async def main() -> list[CallStatus]:
        async with AsyncClient(registry, budgeted) as client:
            statuses = []
            for n in range(3):
                batch = await client.dispatch(one("charged", f"a{n}", text="x"), tenant="acme")
                statuses.append(batch.calls[0].status)
                assert (await client.result(batch.calls[0].call_id)).tenant == "acme"
            return statuses

    assert asyncio.run(main()) == [CallStatus.QUEUED, CallStatus.QUEUED, CallStatus.DENIED]


def test_rules_set_before_the_run_exists_claim_it_for_the_tenant(client: Client) -> None:
    from toolq.errors import NotRunOwnerError

    client.approvals.set_rules("early", mode="strict", principal="p", tenant="acme")
    made = client.dispatch(one("free", "f", text="x"), run_id="early", principal="p", tenant="acme")
    assert made.calls[0].status is CallStatus.QUEUED
    with pytest.raises(NotRunOwnerError, match="another tenant"):
        client.dispatch(one("free", "g", text="x"), run_id="early", principal="p", tenant="globex")
    with pytest.raises(NotRunOwnerError, match="another tenant"):
        client.approvals.set_rules("early", mode="strict", principal="p", tenant="globex")


def test_a_batch_that_runs_out_of_budget_midway(client: Client, inproc: InProcess) -> None:
    assert client.settings.calls_per_message > 1  # the four calls share batch messages
    worker = inproc.worker(app=APP)
    batch = client.dispatch(
        [{"id": f"b{n}", "name": "charged", "arguments": {"text": str(n)}} for n in range(4)],
        tenant="acme",
    )
    assert [c.status for c in batch.calls] == [CallStatus.QUEUED] * 2 + [CallStatus.DENIED] * 2
    worker.drain()
    results = batch.wait(5)
    assert [r.status for r in results] == [CallStatus.SUCCEEDED] * 2 + [CallStatus.DENIED] * 2
    assert [r.output for r in results[:2]] == ["0", "1"]
    assert all(r.error_type == BudgetExceededError.code for r in results[2:])
    assert spent(client, "acme") == 2
    keys = Keys(client.settings.key_prefix)
    assert not client.redis.zrange(keys.unsent, 0, -1)
    assert not client.redis.zrange(keys.queued, 0, -1)


@pytest.mark.parametrize(
    ("per", "at", "start", "end"),
    [
        ("minute", "2026-11-22T20:41:59", "2026-11-22T20:41:00", "2026-11-22T20:42:00"),
        ("hour", "2026-11-22T20:41:59", "2026-11-22T20:00:00", "2026-11-22T21:00:00"),
        ("day", "2026-11-22T20:41:59", "2026-11-22T00:00:00", "2026-11-23T00:00:00"),
        ("month", "2026-12-31T23:59:59", "2026-12-01T00:00:00", "2027-01-01T00:00:00"),
        ("month", "2028-02-29T12:00:00", "2028-02-01T00:00:00", "2028-03-01T00:00:00"),
    ],
)
def test_budget_periods_are_calendar_periods_in_utc(per, at, start, end) -> None:
    from datetime import UTC, datetime

    def ts(text: str) -> float:
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()

    period = period_of(Budget(limit=1, per=per), ts(at))
    assert (period.start, period.end) == (ts(start), ts(end))
    assert period.reset_at == end + "Z"
    assert period.name.startswith(per + ":")
    assert period_of(Budget(limit=1, per=per), ts(end)).start == ts(end)  # the next one
