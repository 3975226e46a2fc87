"""The dispatcher's stages: their order, a refusing stage stopping the later ones, typed fields."""

from __future__ import annotations

from typing import Any

from toolq import Client, Settings, ToolRegistry
from toolq.dispatch.stages import Charge, Gate, Place, Price, Schedule, Seal, Validate
from toolq.dispatch.submission import Submission
from toolq.errors import CostError
from toolq.models import CallEnvelope, CallStatus, EventType
from toolq.quotas import Budget, TenantConfig
from toolq.results.store import NewCall, Parking, Scheduled


def test_the_stages_run_in_order_and_only_the_first_four_refuse(client: Client):
    stages = client.dispatcher.stages
    assert [type(s) for s in stages] == [Validate, Price, Gate, Seal, Place, Schedule, Charge]
    assert [s.refuses for s in stages] == [True] * 4 + [False] * 3


def gated_registry(asked: list[dict[str, Any]]) -> ToolRegistry:
    registry = ToolRegistry()

    def predicate(arguments: dict[str, Any]) -> bool:
        asked.append(arguments)
        return False

    def price(text: str) -> float:
        if text == "unpriced":
            raise RuntimeError("price list unavailable")
        return 1.0

    @registry.tool(cost=price, requires_approval=predicate)
    def priced(text: str) -> str:
        """Costs 1, unless its price list is unavailable."""
        return text

    return registry


def test_a_call_its_price_fails_never_reaches_the_gate(settings: Settings):
    asked: list[dict[str, Any]] = []
    budgeted = settings.model_copy(
        update={"tenants": {"acme": TenantConfig(budget=Budget(limit=10))}}
    )
    with Client(gated_registry(asked), budgeted) as client:
        batch = client.submit(
            [
                {"id": "c1", "name": "priced", "arguments": {"text": "unpriced"}},
                {"id": "c2", "name": "priced", "arguments": {"text": "priced"}},
                {"id": "c3", "name": "priced", "arguments": {}},
            ],
            Submission(tenant="acme"),
        )
        first, second, third = client.store.results(batch.call_ids)
    assert (first.status, first.error_type) == (CallStatus.FAILED, CostError.code)
    assert second.status is CallStatus.QUEUED
    assert third.status is CallStatus.FAILED  # invalid (no text): refused by validate, never priced
    assert asked == [{"text": "priced"}]  # the gate saw only the call that passed price


def test_a_parked_scheduled_call_waited_on_writes_its_typed_fields_in_order():
    envelope = CallEnvelope(call_id="c1", run_id="r1", tool_call_id="t1", name="wipe")
    parked = NewCall(
        envelope,
        CallStatus.AWAITING_APPROVAL,
        EventType.AWAITING_APPROVAL,
        {},
        deadline=12.5,
        parking=Parking(digest="d1", approval_metadata='{"team":"ops"}', preview=True),
        schedule=Scheduled("backlog", "lane", {"lane": "lane", "backlog": "backlog"}),
        notify="inbox",
    )
    assert list(parked.record_fields().items()) == [
        ("digest", "d1"),
        ("deadline", "12.5"),
        ("approval_metadata", '{"team":"ops"}'),
        ("preview_state", "pending"),
        ("lane", "lane"),
        ("backlog", "backlog"),
    ]  # the inbox (notify) is CREATE's own ARGV, not an extra field
    queued = NewCall(envelope, CallStatus.QUEUED, EventType.QUEUED, {}, approval='{"sig":"s"}')
    assert queued.record_fields() == {"approval": '{"sig":"s"}'}
    assert NewCall(envelope, CallStatus.QUEUED, EventType.QUEUED, {}).record_fields() == {}
