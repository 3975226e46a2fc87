"""A call of a tool that is not idempotent, lost with its worker, whose time limit is shorter
than the lease.

The sweeper recovers a dead worker's call about a lease after the death (``recover.lua``).
A call found past its tool's time limit by then was failed as a ``timeout``, whatever the
tool: but its worker died mid-call, so its side effect may have happened, and ``failed`` lets
its submitter retry it (``POST /v1/calls/{id}/retry``, ``Client.retry``) or the model dispatch
it again, with no person's resolution. The guarantee: a lost call of a tool not marked
idempotent becomes ``unknown``, and runs again only on a person's signed ``rerun``.
"""

from __future__ import annotations

import pytest
import redis

from tests.apps import record
from tests.conftest import Workers
from toolq import CallStatus, Client, ToolContext, ToolRegistry
from toolq.errors import NotRetryableError

pytestmark = pytest.mark.e2e

registry = ToolRegistry()


@registry.tool(timeout=1.5)
def pay(amount: int, ctx: ToolContext) -> str:
    """Pays (recorded), then takes a while to confirm on its first execution."""
    if record(ctx, "pay") == 1:
        ctx.wait_cancelled(1.2)
    return f"paid {amount}"


APP = f"{__name__}:registry"


def test_a_lost_call_past_its_time_limit_is_unknown_not_failed(
    r: redis.Redis, workers: Workers, settings, wait_for
) -> None:
    assert settings.lease_seconds > 1.5  # the tool's limit is shorter than the lease
    victim = workers.start("safe", concurrency=1, TOOLQ_APP=APP)
    with Client(registry, settings) as client:
        batch = client.dispatch(
            [{"id": "p1", "name": "pay", "arguments": {"amount": 100}}], principal="agent"
        )
        [call_id] = batch.call_ids
        wait_for(lambda: r.llen(f"test:exec:{call_id}") == 1, message="never started")
        workers.kill9(victim)  # mid-call: the payment was made, its confirmation never written
        workers.start("safe", concurrency=1, TOOLQ_APP=APP)
        wait_for(
            lambda: client.result(call_id).status is not CallStatus.RUNNING,
            timeout=20,
            message="the lost call was never recovered",
        )
        lost = client.result(call_id)
        assert lost.status is CallStatus.UNKNOWN, (lost.status, lost.error_type)
        with pytest.raises(NotRetryableError):
            client.retry(call_id, principal="agent")
        assert r.llen(f"test:exec:{call_id}") == 1
