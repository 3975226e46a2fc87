"""Budgets against real worker processes: two ``toolq worker``s."""

from __future__ import annotations

import pytest

from tests.conftest import Workers
from tests.tenants.app import registry
from toolq import Client, Settings
from toolq.errors import BudgetExceededError
from toolq.models import CallStatus
from toolq.quotas import Budget, TenantConfig

pytestmark = pytest.mark.e2e


def test_a_budget_of_2_with_cost_1_denies_the_third_call_on_two_workers(
    settings: Settings, workers: Workers
) -> None:
    for _ in range(2):
        workers.start("safe", TOOLQ_APP="tests.tenants.app:registry")
    budgeted = settings.model_copy(
        update={"tenants": {"acme": TenantConfig(budget=Budget(limit=2, per="day"))}}
    )
    with Client(registry, budgeted) as client:
        results = []
        for n in range(3):
            payload = [{"id": f"c{n}", "name": "charged", "arguments": {"text": str(n)}}]
            results.append(client.dispatch(payload, tenant="acme").wait(30)[0])
        again = client.dispatch(
            [{"id": "c0", "name": "charged", "arguments": {"text": "0"}}],
            run_id=results[0].run_id,
            tenant="acme",
        )
    assert [r.status for r in results] == [
        CallStatus.SUCCEEDED,
        CallStatus.SUCCEEDED,
        CallStatus.DENIED,
    ]
    assert [r.output for r in results[:2]] == ["0", "1"]
    assert results[2].error_type == BudgetExceededError.code
    assert again.calls[0].duplicate and again.calls[0].status is CallStatus.SUCCEEDED
