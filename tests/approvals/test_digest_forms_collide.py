"""The two digest forms a worker accepts must not let one call's approval cover another.

``digest_call(name, args)`` is the SHA-256 of ``{"arguments": args, "tool": name}`` as
canonical JSON, which is exactly ``digest_arguments({"arguments": args, "tool": name})``.
So every decision this release signs is also an "old form" decision (the release before
digest_call) for the arguments ``{"arguments": args, "tool": name}``: a Redis writer (no
signing key) who rewrites an approved call's arguments into that shape has the worker run
the call with arguments nobody approved. Here a tool whose schema takes extra properties
(a raw JSON schema, as an MCP upstream's tools are) and has a default for its target runs
against that default, "production", while the person approved "staging".
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.approvals.conftest import start_verifying
from tests.conftest import make_settings
from toolq import Client, RiskLevel, ToolContext, ToolRegistry
from toolq.approvals.policy import digest_arguments, digest_call
from toolq.registry.tool import Tool
from toolq.results.connection import redis_client

pytestmark = pytest.mark.e2e

registry = ToolRegistry()


class Deploy(Tool):
    """Deploy to a target (recording the arguments it ran with)."""

    name = "deploy"
    risk_level = RiskLevel.DANGEROUS
    parameters = {
        "type": "object",
        "properties": {"target": {"type": "string", "default": "production"}},
    }

    def execute(self, ctx: ToolContext, **arguments: Any) -> str:
        url = os.environ.get("TOOLQ_REDIS_URL") or os.environ["TOOLQ_TEST_REDIS_URL"]
        redis_client(url).rpush(f"test:ran:{ctx.call_id}", json.dumps(arguments))
        return f"deployed {arguments.get('target')}"


registry.register(Deploy)


def test_the_two_forms_coincide_on_a_crafted_shape():
    approved = {"target": "staging"}
    forged = {"arguments": approved, "tool": "deploy"}
    assert digest_arguments(forged) == digest_call("deploy", approved)


def test_an_approval_is_not_replayed_onto_arguments_shaped_as_the_old_digest(inproc, r, pair):
    with Client(registry, make_settings(approval_signing_key=pair.signing)) as approver:
        batch = approver.dispatch(
            [{"id": "d1", "name": "deploy", "arguments": {"target": "staging"}}],
            principal="agent",
        )
        call_id = batch.call_ids[0]
        approver.approvals.approve(call_id, by="alice")  # no worker yet: queued, signed
        # the Redis writer: same call, same tool, the arguments rewritten into the shape
        key = f"toolq:call:{call_id}"
        envelope = json.loads(r.hget(key, "envelope"))
        envelope["arguments"] = {"arguments": envelope["arguments"], "tool": envelope["name"]}
        r.hset(
            key,
            mapping={
                "envelope": json.dumps(envelope),
                "digest": digest_call(envelope["name"], envelope["arguments"]),
            },
        )
        start_verifying(inproc, pair.verify, app=f"{__name__}:registry")
        [result] = batch.wait(timeout=30)
        ran = [json.loads(x) for x in r.lrange(f"test:ran:{call_id}", 0, -1)]
        assert ran == [], f"ran with arguments nobody approved: {ran}"
        assert result.error_type == "approval_unverified", (result.status, result.error)
