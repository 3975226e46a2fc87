"""A live worker's prefetched messages are not re-sent as "taken and never started".

kombu keeps a message a worker prefetched in its ``unacked`` hash until the worker acks it.
A busy worker holds several behind the call it runs, longer than ``TOOLQ_REDELIVER_AFTER``:
the sweeper must not take them for a dead worker's (each such re-send is an extra message,
an extra delivery and a ``not run`` line). The heartbeat names the calls a worker holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.conftest import Workers
from toolq import CallStatus, Client
from toolq.keys import Keys
from toolq.settings import Settings

pytestmark = pytest.mark.e2e


def test_a_busy_live_workers_held_messages_are_not_resent(
    settings: Settings, workers: Workers, r: redis.Redis, tmp_path: Path
) -> None:
    from tests.apps import registry

    log = tmp_path / "worker.log"
    workers.start("safe", concurrency=1, prefetch=4, log=log, loglevel="info",
                  TOOLQ_REDELIVER_AFTER="1")  # fmt: skip
    with Client(registry, settings) as client:
        # One message per call (one dispatch each), as separate agent turns send them.
        batches = [
            client.dispatch([{"id": f"s{i}", "name": "slow", "arguments": {"seconds": 0.8}}])
            for i in range(6)
        ]
        results = [b.wait(timeout=90)[0] for b in batches]
    assert [x.status for x in results] == [CallStatus.SUCCEEDED] * len(batches), results
    text = log.read_text()
    resent = list(r.scan_iter(match=Keys(settings.key_prefix).resent("*")))
    skipped = text.count("not run")
    assert (len(resent), skipped) == (0, 0), f"{len(resent)} re-sent, {skipped} skipped"
    assert "re-sending" not in text, text[-3000:]
    for call_id in (b.call_ids[0] for b in batches):
        assert r.llen(f"test:exec:{call_id}") == 1
