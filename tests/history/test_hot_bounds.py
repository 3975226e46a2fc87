"""With the history store on, what a call leaves in Redis beside its record is bounded by the
hot window too: its idempotency key, its copy in the client's wait inbox, its run's place in
the runs indexes; and nothing a reader relied on is lost with them."""

from __future__ import annotations

import time

import pytest

from tests.apps import registry
from tests.conftest import make_settings
from toolq import CallStatus, Client
from toolq.errors import CallIdConflictError
from toolq.history.archiver import Archiver
from toolq.history.store import HistoryStore
from toolq.keys import Keys
from toolq.testing import TestWorker


def echo(call_id: str, text: str) -> list[dict[str, object]]:
    return [{"id": call_id, "name": "echo", "arguments": {"text": text}}]


def archive(r, settings) -> int:
    history = HistoryStore(settings.history_url)
    try:
        return Archiver(r, Keys(settings.key_prefix), settings, history, "t").step(100)
    finally:
        history.close()


def test_an_idempotency_key_gets_its_records_ttl_once_the_call_is_archived(r, history_url):
    settings = make_settings(history_url=history_url, hot_seconds=30)
    keys = Keys(settings.key_prefix)
    with Client(registry, settings) as client:
        sent = client.dispatch(echo("e1", "hi"), run_id="run-idem", principal="agent")
        idem = keys.idempotency("agent", "run-idem", "call:e1")
        assert r.get(idem).decode().startswith(sent.call_ids[0])
        # In flight, and final but not archived: the key keeps the result TTL.
        assert r.ttl(idem) > settings.hot_seconds
        with TestWorker(settings, registry) as worker:
            worker.drain()
        sent.wait(timeout=5)
        assert r.ttl(idem) > settings.hot_seconds
        assert archive(r, settings) == 1
        record_ttl = r.ttl(keys.call(sent.call_ids[0]))
        assert 0 < record_ttl <= settings.hot_seconds
        assert abs(r.ttl(idem) - record_ttl) <= 1


def test_a_retried_dispatch_after_the_hot_window_returns_the_original_call(r, history_url):
    settings = make_settings(history_url=history_url, hot_seconds=1)
    keys = Keys(settings.key_prefix)
    with Client(registry, settings) as client:
        first = client.dispatch(
            echo("e1", "hi") + echo("e2", "ho"), run_id="run-retry", principal="agent"
        )
        with TestWorker(settings, registry) as worker:
            worker.drain()
        first.wait(timeout=5)
        assert archive(r, settings) == 2
        time.sleep(1.3)
        idem = keys.idempotency("agent", "run-retry", "call:e1")
        assert not r.exists(idem, keys.call(first.call_ids[0]))

        again = client.dispatch(
            echo("e1", "hi") + echo("e2", "ho"), run_id="run-retry", principal="agent"
        )
        assert again.call_ids == first.call_ids
        assert [c.duplicate for c in again.calls] == [True, True]
        assert [c.status for c in again.calls] == [CallStatus.SUCCEEDED] * 2
        assert [x.output for x in again.wait(timeout=5)] == [{"text": "hi"}, {"text": "ho"}]
        assert not r.exists(keys.run_calls("run-retry"))  # nothing was created again

        # One archived, one new: the new one is created, in its place.
        mixed = client.dispatch(
            echo("e1", "hi") + echo("e3", "new"), run_id="run-retry", principal="agent"
        )
        assert mixed.call_ids[0] == first.call_ids[0]
        assert mixed.call_ids[1] not in first.call_ids
        assert [c.duplicate for c in mixed.calls] == [True, False]

        # The same id for other arguments is still refused, as it is while the key is hot.
        with pytest.raises(CallIdConflictError):
            client.dispatch(echo("e2", "other"), run_id="run-retry", principal="agent")
