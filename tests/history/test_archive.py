"""Finished calls go to the history store exactly once and are read from it afterwards."""

from __future__ import annotations

import json
import time

from tests.apps import registry
from tests.conftest import make_settings
from toolq import CallStatus, Client, EventType
from toolq.history.archiver import Archiver, lag_seconds
from toolq.history.store import HistoryStore
from toolq.keys import HISTORY_GROUP, Keys
from toolq.testing import TestWorker


def call(name: str, call_id: str, **arguments: object) -> list[dict[str, object]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


def test_finished_calls_are_archived_with_their_events_then_read_from_history(r, history_url):
    settings = make_settings(history_url=history_url, hot_seconds=1)
    keys = Keys(settings.key_prefix)
    with Client(registry, settings) as client:
        batch = client.dispatch(call("echo", "e1", text="hi") + call("add", "a1", a=2, b=3))
        with TestWorker(settings, registry) as worker:
            assert worker.drain() == 2
        results = batch.wait(timeout=5)
        assert r.xlen(keys.history_archive) == 2
        assert lag_seconds(r, keys) >= 0
        events_hot = [(e.id, e.type) for e in client.events(batch.run_id)]

        history = HistoryStore(settings.history_url)
        archiver = Archiver(r, keys, settings, history, "a1")
        assert archiver.step(100) == 2
        assert r.xlen(keys.history_archive) == 0
        assert not r.xpending(keys.history_archive, HISTORY_GROUP)["pending"]
        assert history.counts()["history_calls"] == 2
        assert 0 < r.ttl(keys.call(batch.call_ids[0])) <= 1
        assert 0 < r.ttl(keys.run_stream(batch.run_id)) <= 1
        time.sleep(1.2)
        assert not r.exists(keys.call(batch.call_ids[0]), keys.run_stream(batch.run_id))

        # Every read path finds the calls in history now.
        assert [x.model_dump() for x in client.wait(batch.call_ids, timeout=2)] == [
            x.model_dump() for x in results
        ]
        assert client.result(batch.call_ids[1]).output == 5
        assert [x.call_id for x in client.results(batch.run_id)] == batch.call_ids
        assert [(e.id, e.type) for e in client.events(batch.run_id)] == events_hot
        after = events_hot[1][0]
        assert [e.id for e in client.events(batch.run_id, after=after)] == [
            i for i, _ in events_hot[2:]
        ]
        assert events_hot[-1][1] is EventType.SUCCEEDED
        assert client.calls_page(batch.run_id).total == 2
        assert client.result(batch.call_ids[0]).status is CallStatus.SUCCEEDED
        # A second archive of the same calls writes nothing new.
        stored = history.records(batch.call_ids)
        assert json.loads(json.dumps(stored))[batch.call_ids[0]]["status"] == "succeeded"
        history.close()


def test_a_call_changed_after_it_was_archived_is_archived_again(r, history_url):
    settings = make_settings(history_url=history_url)
    keys = Keys(settings.key_prefix)
    with Client(registry, settings) as client:
        parked = client.dispatch(
            [{"id": "w1", "name": "wipe", "arguments": {"target": "/tmp/x"}}],
            run_id="r-retry",
            principal="agent",
        )
        [call_id] = parked.call_ids
        client.approvals.deny(call_id, "alice", "no")
        history = HistoryStore(settings.history_url)
        archiver = Archiver(r, keys, settings, history, "a1")
        assert archiver.step(100) == 1
        assert "retried_by" not in history.record(call_id)
        new = client.retry(call_id, principal="agent")
        assert archiver.step(100) == 1
        assert history.record(call_id)["retried_by"] == new.call_id
        assert history.counts()["history_calls"] == 1  # the same row, replaced
        history.close()


def test_a_batch_reads_its_run_stream_back_only_to_its_oldest_call(r, history_url):
    settings = make_settings(history_url=history_url, history_batch=5000)
    keys = Keys(settings.key_prefix)

    def xrevranges() -> int:
        return int(r.info("commandstats").get("cmdstat_xrevrange", {}).get("calls", 0))

    with Client(registry, settings) as client:
        client.dispatch(
            [{"id": f"u{i}", "name": "no_such_tool", "arguments": {}} for i in range(3000)],
            run_id="r-long",
        )
        history = HistoryStore(settings.history_url)
        archiver = Archiver(r, keys, settings, history, "a1")
        assert archiver.step(100) == 3000
        late = client.dispatch(
            [{"id": "late", "name": "no_such_tool", "arguments": {}}], run_id="r-long"
        )
        before = xrevranges()
        assert archiver.step(100) == 1
        assert xrevranges() - before == 1  # one chunk from the end, not 3,001 entries
        assert [f["call_id"] for _, f in history.events("r-long")][-1] == late.call_ids[0]
        assert history.counts()["history_events"] == 3001
        history.close()
