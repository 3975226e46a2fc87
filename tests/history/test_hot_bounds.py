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


def test_a_waiter_gets_its_result_after_the_reader_trimmed_its_inbox(r):
    settings = make_settings()
    with Client(registry, settings) as client, TestWorker(settings, registry) as worker:
        warm = client.dispatch(echo("w", "warm"))
        worker.drain()
        warm.wait(timeout=5)  # from now on this client's calls name its reader's inbox
        inbox = client.log.waits.inbox
        time.sleep(1.1)  # past the reader's trim interval
        sent = [client.dispatch(echo(f"e{i}", f"t{i}")) for i in range(3)]
        worker.drain()
        assert r.xlen(inbox) == 3
        # The first wait reads all three final events and trims what it read.
        assert sent[0].wait(timeout=5)[0].output == {"text": "t0"}
        deadline = time.monotonic() + 3  # the reader trims right after it handed them out
        while r.xlen(inbox) > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert r.xlen(inbox) <= 1
        # The others' entries left Redis: their waiters still get them.
        assert [b.wait(timeout=5)[0].output for b in sent[1:]] == [{"text": "t1"}, {"text": "t2"}]


def test_a_run_listing_finds_runs_the_hot_window_let_go_from_the_index(r, history_url):
    settings = make_settings(history_url=history_url, hot_seconds=1)
    keys = Keys(settings.key_prefix)
    with Client(registry, settings) as client:
        old = [
            client.dispatch(echo("o", f"old{i}"), run_id=f"run-old-{i}", principal="agent")
            for i in range(3)
        ]
        with TestWorker(settings, registry) as worker:
            worker.drain()
            for batch in old:
                batch.wait(timeout=5)
            assert archive(r, settings) == 3
            time.sleep(1.3)
            # Archived whole: the runs left the indexes and their keys expired.
            assert r.zcard(keys.runs) == 0 and r.zcard(keys.tenant_runs("default")) == 0
            assert not r.exists(keys.run_calls("run-old-0"))
            live = client.dispatch(echo("n", "new"), run_id="run-new", principal="agent")
            # Into an archived run again: it is listed once, by its new dispatch.
            again = client.dispatch(echo("o2", "more"), run_id="run-old-1", principal="agent")

        page = client.runs()
        assert [s.run_id for s in page.items] == ["run-old-1", "run-new", "run-old-2", "run-old-0"]
        assert page.total == 4
        assert page.items[2].statuses == {"succeeded": 1} and page.items[2].owner == "agent"
        assert page.items[0].calls == 1  # what Redis holds of it: the new call
        assert page.items[0].last_dispatch_at == r.zscore(keys.runs, "run-old-1")

        # Paged one by one, the same runs in the same order, each once.
        seen, cursor = [], None
        while True:
            one = client.runs(limit=1, cursor=cursor, tenant="default")
            seen.extend(s.run_id for s in one.items)
            if one.next_cursor is None:
                break
            cursor = one.next_cursor
        assert seen == ["run-old-1", "run-new", "run-old-2", "run-old-0"]
        assert client.run("run-old-0").last_dispatch_at is not None
        assert live.call_ids and again.call_ids
