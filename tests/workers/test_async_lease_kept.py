"""An async call that ended keeps its lease until its FINISH is written, even while the
slot runs a long synchronous sibling of its message first."""

from __future__ import annotations

import threading
import time

from tests.apps import registry
from tests.conftest import make_settings
from toolq import CallStatus, Client
from toolq.keys import Keys
from toolq.testing import TestWorker


def test_an_ended_async_call_keeps_its_lease_while_a_sync_sibling_runs(r, wait_for):
    settings = make_settings(lease_seconds=1.0, calls_per_message=10)
    keys = Keys(settings.key_prefix)
    with Client(registry, settings) as client, TestWorker(settings, registry) as worker:
        batch = client.dispatch(
            [
                {"id": "a", "name": "async_sleeper", "arguments": {"seconds": 0.05}},
                {"id": "s", "name": "slow", "arguments": {"seconds": 4.0}},
            ]
        )
        quick, long = batch.call_ids
        draining = threading.Thread(target=worker.drain)
        draining.start()
        try:
            # Both started (however long a loaded machine took to get there); then past the
            # lease: the async call ended long ago, the slot still runs the sync one.
            running = [b"running", b"running"]
            wait_for(
                lambda: [r.hget(keys.call(c), "status") for c in (quick, long)] == running,
                timeout=30,
                message="the worker did not start both calls",
            )
            time.sleep(settings.lease_seconds * 1.5)
            assert r.hget(keys.call(long), "status") == b"running"
            assert r.hget(keys.call(quick), "status") == b"running"  # its FINISH waits
            # A lapsed lease would let recovery take the call from this worker.
            assert r.exists(keys.lease(quick)), "the ended call's lease lapsed before FINISH"
            assert worker.sweep().get("unknown", 0) == 0  # else its result is dropped
        finally:
            draining.join(timeout=30)
        assert [x.status for x in batch.wait(timeout=5)] == [CallStatus.SUCCEEDED] * 2


def test_a_lease_that_lapsed_while_nobody_recovered_the_call_is_taken_back(r, wait_for):
    """A worker starved of CPU past its lease (its keeper late) keeps running the call, and
    the call ends as it ends — not cancelled by the worker itself — while no sweeper
    recovered it in between."""
    settings = make_settings(lease_seconds=1.0)
    keys = Keys(settings.key_prefix)
    with Client(registry, settings) as client, TestWorker(settings, registry) as worker:
        batch = client.dispatch([{"id": "s", "name": "slow", "arguments": {"seconds": 2.0}}])
        [call_id] = batch.call_ids
        draining = threading.Thread(target=worker.drain)
        draining.start()
        try:
            wait_for(lambda: r.exists(keys.lease(call_id)) == 1, timeout=30)
            r.delete(keys.lease(call_id))  # what a lapse does, the keeper not there in time
            wait_for(
                lambda: r.exists(keys.lease(call_id)) == 1,
                timeout=10,
                message="the keeper did not take the lease back",
            )
        finally:
            draining.join(timeout=30)
        [result] = batch.wait(timeout=10)
        assert result.status is CallStatus.SUCCEEDED
