"""The scripts write the webhook outbox that keys.py names for the settings' key prefix."""

from __future__ import annotations

from tests.conftest import make_settings
from toolq import Client
from toolq.keys import Keys


def test_outbox_names_follow_the_key_prefix(r):
    from tests.apps import registry

    settings = make_settings(key_prefix="acme:prod")
    keys = Keys("acme:prod")
    r.sadd(keys.webhook_events, "call.failed")
    with Client(registry, settings) as client:
        batch = client.dispatch(
            [
                {"id": "x1", "name": "no_such_tool", "arguments": {}},
                {"id": "x2", "name": "echo", "arguments": {"text": "queued, not wanted"}},
            ],
            run_id="run:with:colons",
        )
    ((_, fields),) = r.xrange(keys.webhook_outbox)
    assert fields[b"type"] == b"call.failed"
    assert fields[b"call_id"].decode() == batch.call_ids[0]
    assert fields[b"run_id"] == b"run:with:colons"
    assert not r.exists(Keys().webhook_outbox)


def test_a_put_off_delivery_keeps_its_attempts(r):
    """A delivery not sent because the replicas had not confirmed its event is put off
    without counting the attempt (a long replica outage must not dead-letter it)."""
    from toolq.webhooks.outbox import Outbox

    keys = Keys()
    r.hset(keys.webhook_delivery("d1"), mapping={"hook": "h", "attempts": "3", "type": "x"})
    r.zadd(keys.webhook_due, {"d1": 100.0})
    outbox = Outbox(r, keys, "consumer")
    claimed = outbox.claim("d1", now=200.0, until=300.0)
    assert claimed is not None and claimed.attempts == 4
    outbox.postpone("d1", 250.0, "unconfirmed")
    assert r.hget(keys.webhook_delivery("d1"), "attempts") == b"3"
    assert r.zscore(keys.webhook_due, "d1") == 250.0
    assert outbox.due(260.0, 10) == ["d1"]
