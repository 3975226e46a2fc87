"""The worker's two per-call scripts: safe to repeat, and run on a connection of their own."""

from __future__ import annotations

import redis

from tests.apps import registry
from toolq import CallStatus, Client, Settings
from toolq.models import CallResult
from toolq.results.connection import redis_client
from toolq.results.store import CallStore

CANCELLED = {"error": "cancelled before it started", "error_type": "cancelled"}


def _queued_call(client: Client) -> tuple[str, str]:
    batch = client.dispatch([{"id": "a", "name": "echo", "arguments": {"text": "x"}}])
    return batch.call_ids[0], batch.run_id


def _types(client: Client, run_id: str) -> list[str]:
    return [e.type.value for e in client.events(run_id)]


def test_a_repeated_start_or_finish_changes_nothing(r: redis.Redis, settings: Settings) -> None:
    # A retry after a lost reply repeats the script with the same token.
    client = Client(registry, settings)
    store = CallStore(redis_client(settings.redis_url), settings)
    try:
        call_id, run_id = _queued_call(client)
        first = store.start(call_id, "tok", CANCELLED, run_id)
        again = store.start(call_id, "tok", CANCELLED, run_id)
        assert (first.outcome, again.outcome) == ("ok", "ok")
        assert first.envelope == again.envelope and (first.attempt, again.attempt) == (1, 1)
        assert store.start(call_id, "other", CANCELLED, run_id).outcome == "skip"

        assert first.envelope is not None
        result = CallResult(
            call_id=call_id, tool_call_id="a", name="echo", status=CallStatus.SUCCEEDED, output=1
        )
        assert store.finish(first.envelope, "tok", result)
        assert store.finish(first.envelope, "tok", result)
        assert not store.finish(first.envelope, "other", result)
        assert _types(client, run_id) == ["call.queued", "call.started", "call.succeeded"]
        assert client.result(call_id).output == 1
    finally:
        client.close()


def test_scripts_survive_a_script_flush_and_a_dropped_connection(
    r: redis.Redis, settings: Settings
) -> None:
    client = Client(registry, settings)
    store = CallStore(redis_client(settings.redis_url), settings)
    try:
        batch = client.dispatch(
            [{"id": i, "name": "echo", "arguments": {"text": i}} for i in ("a", "b")]
        )
        first, second = batch.call_ids
        assert store.start(first, "t1", CANCELLED, batch.run_id).outcome == "ok"  # connects
        r.script_flush()  # as after a Redis restart without persistence of scripts
        killed = r.client_kill_filter(_type="normal", skipme=True)  # other connections drop
        assert killed >= 1
        assert store.start(second, "t2", CANCELLED, batch.run_id).outcome == "ok"
        assert r.hget(f"toolq:call:{second}", "status") == b"running"
    finally:
        client.close()
