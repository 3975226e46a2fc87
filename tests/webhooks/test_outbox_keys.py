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
