"""Webhooks from workers (in-process; kill -9 on a real process) to a local HTTP server."""

from __future__ import annotations

import json
import time

import pytest

from tests.webhooks.conftest import Receiver, call, wait_until
from toolq import CallStatus
from toolq.keys import Keys
from toolq.webhooks import SIGNATURE_HEADER, sign, verify_signature

pytestmark = pytest.mark.e2e

SECRET = "whsec-test-1234"
PUBLIC = "https://toolq.example.test"


def hooks_env(receiver: Receiver, **extra: str) -> dict[str, str]:
    hooks = [
        {
            "url": f"{receiver.url}/hook",
            "secret": SECRET,
            "events": [
                "call.awaiting_approval",
                "call.approved",
                "call.denied",
                "call.expired",
                "call.failed",
            ],
        },
        {"url": f"{receiver.url}/slack", "format": "slack", "events": ["call.awaiting_approval"]},
    ]
    return {
        "TOOLQ_WEBHOOKS": json.dumps(hooks),
        "TOOLQ_PUBLIC_URL": PUBLIC,
        "TOOLQ_WEBHOOK_BACKOFF": "0.2",
        **extra,
    }


def test_events_arrive_signed_masked_and_linked(receiver, inproc, client, r):
    inproc.start(env=hooks_env(receiver))
    parked = client.dispatch(
        call("l1", "login", user="ann", password="hunter2-secret"), principal="agent"
    )
    call_id = parked.call_ids[0]
    wait_until(lambda: receiver.of("/hook") and receiver.of("/slack"))
    (sent,) = receiver.of("/hook")
    assert verify_signature(SECRET, sent.headers[SIGNATURE_HEADER], sent.body)
    assert sent.headers["X-Toolq-Event"] == "call.awaiting_approval"
    doc = sent.json
    assert doc["type"] == "call.awaiting_approval"
    assert doc["call"] == {
        "id": call_id,
        "run_id": parked.run_id,
        "tool": "login",
        "risk": "dangerous",
    }
    assert doc["url"] == f"{PUBLIC}/#/calls/{call_id}"
    assert doc["data"]["arguments"]["user"] == "ann"
    assert doc["data"]["arguments"]["password"] != "hunter2-secret"
    assert doc["data"]["tenant"] == "default"
    (slack,) = receiver.of("/slack")
    assert set(slack.json) == {"text"}
    assert "login" in slack.json["text"] and f"{PUBLIC}/#/calls/{call_id}" in slack.json["text"]
    for got in (sent, slack):
        assert b"hunter2" not in got.body  # masked, never the secret value

    client.approvals.deny(call_id, by="bob", reason="not today")
    expired = client.dispatch(call("h1", "hurry"), principal="agent")
    failed = client.dispatch(call("b1", "boom"), principal="agent")
    assert failed.wait(timeout=20)[0].status is CallStatus.FAILED
    wait_until(lambda: len(receiver.of("/hook")) >= 5, message=str(receiver.received))
    by_type = {r.json["type"]: r.json for r in receiver.of("/hook")}
    assert by_type["call.denied"]["data"]["by"] == "bob"
    assert by_type["call.denied"]["data"]["reason"] == "not today"
    assert by_type["call.expired"]["call"]["id"] == expired.call_ids[0]
    assert by_type["call.failed"]["call"]["id"] == failed.call_ids[0]
    assert "output" not in json.dumps(by_type["call.failed"]["data"])
    # The Slack endpoint asked for approvals waits only.
    assert len(receiver.of("/slack")) == 2
    # The deliverer marks a delivery done once its endpoint answered: after the receiver saw it.
    wait_until(lambda: not r.zcard(Keys().webhook_due), message="deliveries still due")


def test_a_delivery_survives_failures_and_kill_9_of_its_worker(receiver, workers, client, r):
    # The parked call's delivery fails twice; the denial's, fanned out when the second worker
    # starts (before or after that retry, as timing has it), does not.
    receiver.fail_event = {("/hook", "call.awaiting_approval"): 2}
    env = hooks_env(receiver, TOOLQ_WEBHOOK_BACKOFF="1.5")
    first = workers.start(**env)
    parked = client.dispatch(call("w1", "wipe", target="db"), principal="agent")
    wait_until(lambda: receiver.of("/hook"), message="first attempt never came")
    workers.kill9(first)
    (failed_once,) = receiver.of("/hook")
    assert failed_once.answered == 500
    delivery_id = failed_once.headers["X-Toolq-Delivery"]
    keys = Keys()
    assert r.hget(keys.webhook_delivery(delivery_id), "attempts") == b"1"
    assert r.zscore(keys.webhook_due, delivery_id) is not None
    # With no worker alive, a decision's event still lands in the outbox.
    client.approvals.deny(parked.call_ids[0], by="bob", reason="no")
    assert r.xlen(keys.webhook_outbox) >= 1
    time.sleep(1.0)
    assert len(receiver.of("/hook")) == 1

    workers.start(**env)
    wait_until(
        lambda: len(receiver.of("/hook", 204)) == 2,
        timeout=30,
        message=str([(x.path, x.answered) for x in receiver.received]),
    )
    parked_deliveries = [
        x for x in receiver.of("/hook") if x.json["type"] == "call.awaiting_approval"
    ]
    assert [x.answered for x in parked_deliveries] == [500, 500, 204]
    assert {x.headers["X-Toolq-Delivery"] for x in parked_deliveries} == {delivery_id}
    assert {x.json["id"] for x in parked_deliveries} == {delivery_id}
    (denied,) = [x for x in receiver.of("/hook") if x.json["type"] == "call.denied"]
    assert denied.answered == 204
    wait_until(lambda: not r.zcard(keys.webhook_due))
    assert not r.exists(keys.webhook_delivery(delivery_id))
    assert r.xlen(keys.webhook_outbox) == 0


def test_a_delivery_is_given_up_after_its_last_attempt(receiver, inproc, client, r):
    receiver.fail_first = {"/hook": 100}
    inproc.start(
        env=hooks_env(receiver, TOOLQ_WEBHOOK_MAX_ATTEMPTS="3", TOOLQ_WEBHOOK_BACKOFF="0.1")
    )
    client.dispatch(call("w1", "wipe", target="db"), principal="agent")
    keys = Keys()
    wait_until(lambda: r.llen(keys.webhook_dead) == 1)
    assert len(receiver.of("/hook")) == 3
    dead = json.loads(r.lindex(keys.webhook_dead, 0))
    assert dead["attempts"] == 3 and dead["error"] == "HTTP 500"
    assert not r.zcard(keys.webhook_due)


def test_without_webhooks_nothing_enters_an_outbox(inproc, client, r):
    inproc.start()
    parked = client.dispatch(call("w1", "wipe", target="db"), principal="agent")
    client.approvals.deny(parked.call_ids[0], by="bob")
    assert client.dispatch(call("b1", "boom")).wait(timeout=20)[0].status is CallStatus.FAILED
    keys = Keys()
    assert not r.exists(keys.webhook_events)
    assert not r.exists(keys.webhook_outbox)


def test_a_signature_binds_body_secret_and_time():
    body = b'{"type":"call.awaiting_approval"}'
    now = 1_700_000_000
    header = sign(SECRET, body, now)
    assert verify_signature(SECRET, header, body, now=now + 10)
    assert not verify_signature(SECRET, header, body.replace(b"awaiting", b"approved"), now=now)
    assert not verify_signature("another-secret", header, body, now=now)
    # A captured delivery replayed after the window is refused.
    assert not verify_signature(SECRET, header, body, now=now + 301)
    assert not verify_signature(SECRET, None, body, now=now)
    assert not verify_signature(SECRET, "t=oops,v1=00", body, now=now)
    # Re-signing with another timestamp needs the secret.
    forged = header.replace(f"t={now}", f"t={now + 400}")
    assert not verify_signature(SECRET, forged, body, now=now + 400)
