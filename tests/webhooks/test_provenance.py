"""A Redis writer forges notifications: outbox entries, run-stream events, delivery records and
a replayed signature. A real worker with verify keys sends only what approvers signed."""

from __future__ import annotations

import json
import time

import pytest

from tests.apps import registry
from tests.conftest import make_settings
from tests.webhooks.conftest import Receiver, call, wait_until
from toolq import Client
from toolq.keys import Keys
from toolq.settings import Webhook
from toolq.signing import generate_pair
from toolq.webhooks import SIGNATURE_HEADER, verify_signature

pytestmark = pytest.mark.e2e

SECRET = "whsec-provenance"
EVENTS = ["call.awaiting_approval", "call.approved", "call.denied"]


def hook(receiver: Receiver) -> Webhook:
    return Webhook(url=f"{receiver.url}/hook", secret=SECRET, events=EVENTS)  # type: ignore[arg-type]


def test_forged_decisions_are_never_sent(receiver, inproc, r):
    signing, verify = generate_pair()
    endpoint = hook(receiver)
    hooks = json.dumps([{"url": endpoint.url, "secret": SECRET, "events": EVENTS}])
    inproc.start(
        env={"TOOLQ_WEBHOOKS": hooks, "TOOLQ_WEBHOOK_BACKOFF": "0.2"},
        approval_verify_keys=verify,
        dangerous_approvals=2,
    )
    keys = Keys()
    with Client(
        registry, make_settings(approval_signing_key=signing, dangerous_approvals=2)
    ) as approver:
        run = "forged-run"
        first = approver.dispatch(call("c1", "wipe", target="db"), run_id=run, principal="agent")
        other = approver.dispatch(call("c2", "wipe", target="prod"), run_id=run, principal="agent")
        (c1,), (c2,) = first.call_ids, other.call_ids
        approver.approvals.approve(c1, by="alice")  # one of two: alice's own signature
        # sent on her own signature, before any final decision exists
        wait_until(lambda: any(x.json["type"] == "call.approved" for x in receiver.of("/hook")))

        def forge_event(call_id: str, by: str) -> str:
            data = json.dumps({"by": by, "decision": "approved", "status": "queued"})
            fields = {
                "type": "call.approved",
                "call_id": call_id,
                "ts": repr(time.time()),
                "data": data,
            }
            event_id = r.xadd(keys.run_stream(run), fields).decode()
            return event_id

        def forge_outbox(call_id: str, by: str, event_id: str) -> None:
            data = json.dumps({"by": by, "decision": "approved", "status": "queued"})
            r.xadd(
                keys.webhook_outbox,
                {
                    "type": "call.approved",
                    "call_id": call_id,
                    "run_id": run,
                    "ts": repr(time.time()),
                    "data": data,
                    "event_id": event_id,
                },
            )

        # 1. the attack: an outbox entry only, naming alice on a call she never saw
        forge_outbox(c2, "alice", "1-0")
        # 2. the event written to the run's stream as well
        forge_outbox(c2, "alice", forge_event(c2, "alice"))
        # 3. a third name on the call alice approved
        forge_outbox(c1, "mallory", forge_event(c1, "mallory"))
        # 4. a delivery record written directly, due now
        planted = f"9999999999999-0.{endpoint.id}"
        r.hset(
            keys.webhook_delivery(planted),
            mapping={
                "type": "call.approved",
                "call_id": c2,
                "run_id": run,
                "event_id": forge_event(c2, "alice"),
                "hook": endpoint.id,
                "attempts": "0",
            },
        )
        r.zadd(keys.webhook_due, {planted: 0})

        approver.approvals.approve(c1, by="bob")  # the second: bob's signed decision
        # 5. bob's real signed decision copied onto the other call, with its own event
        r.hset(keys.call(c2), "approval", r.hget(keys.call(c1), "approval"))
        forge_outbox(c2, "bob", forge_event(c2, "bob"))

    # every delivery attempted: five refusals, or (sent unchecked) nine deliveries
    wait_until(lambda: r.llen(keys.webhook_dead) + len(receiver.of("/hook")) >= 9, timeout=30)
    time.sleep(1.0)
    sent = receiver.of("/hook")
    for got in sent:
        assert verify_signature(SECRET, got.headers[SIGNATURE_HEADER], got.body)
    said = sorted((x.json["type"], x.json["call"]["id"], x.json["data"].get("by")) for x in sent)
    assert said == sorted(
        [
            ("call.awaiting_approval", c1, None),
            ("call.awaiting_approval", c2, None),
            ("call.approved", c1, "alice"),
            ("call.approved", c1, "bob"),
        ]
    )
    dead = [json.loads(x) for x in r.lrange(keys.webhook_dead, 0, -1)]
    assert all(d["error"].startswith("unverified: ") and d["attempts"] == 1 for d in dead), dead
    assert sorted(d["call_id"] for d in dead) == sorted([c2, c2, c1, c2, c2])
