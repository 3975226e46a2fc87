"""A waiting client's calls copy their final events to its reader's inbox (one stream to read)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

import toolq.results as results_pkg
from toolq import Client
from toolq.errors import WaitTimeoutError
from toolq.models import FINAL_EVENTS, CallStatus
from toolq.results.waits import INBOX_KEEP_SECONDS


def _activate(client: Client) -> None:
    """A first batch wait: from then on the client's new calls name its inbox."""
    batch = client.dispatch([{"id": "first", "name": "echo", "arguments": {"text": "x"}}])
    batch.wait(timeout=30)
    assert client.log.waits.inbox_used


def test_a_waiting_client_reads_its_inbox_and_no_run_stream(client: Client, inproc, wait_for):
    inproc.start("safe", concurrency=4)
    _activate(client)
    batch = client.dispatch([{"id": "s", "name": "slow", "arguments": {"seconds": 0.5}}])
    waits = client.log.waits
    assert client.redis.hget(client.keys.call(batch.call_ids[0]), "notify") == waits.inbox.encode()
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.extend(batch.wait(timeout=30)))
    thread.start()
    wait_for(lambda: waits.waiting == 1)
    assert waits._runs == {}, "an inbox waiter follows no run stream"
    assert list(waits._calls) == batch.call_ids
    thread.join(30)
    [result] = got
    assert result.status is CallStatus.SUCCEEDED  # type: ignore[attr-defined]
    assert waits.waiting == 0


def test_a_cancelled_call_wakes_its_inbox_waiter(client: Client, inproc) -> None:
    """A call no worker takes, cancelled while queued: the cancel's script copies it too."""
    inproc.start("safe", concurrency=2)
    _activate(client)
    inproc.close_all()
    batch = client.dispatch([{"id": "c", "name": "echo", "arguments": {"text": "never"}}])
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.extend(batch.wait(timeout=30)))
    thread.start()
    with pytest.raises(WaitTimeoutError):
        batch.wait(timeout=0.3)  # queued, nobody runs it
    client.cancel(batch.call_ids[0])
    thread.join(30)
    assert not thread.is_alive()
    [result] = got
    assert result.status is CallStatus.CANCELLED  # type: ignore[attr-defined]


def test_a_call_that_ended_before_its_wait_joined_is_kept_for_it(
    client: Client, inproc, wait_for
) -> None:
    inproc.start("safe", concurrency=4)
    _activate(client)
    waits = client.log.waits
    slow = client.dispatch([{"id": "s", "name": "slow", "arguments": {"seconds": 2}}])
    reading = threading.Thread(target=slow.wait, kwargs={"timeout": 30})
    reading.start()  # keeps the reader reading the inbox
    quick = client.dispatch([{"id": "q", "name": "echo", "arguments": {"text": "q"}}])
    wait_for(lambda: quick.call_ids[0] in waits._orphans)
    [result] = quick.wait(timeout=0.5)
    assert result.output == {"text": "q"}
    assert quick.call_ids[0] not in waits._orphans
    reading.join(30)


def test_a_wait_whose_entry_may_be_dropped_reads_the_run_stream(client: Client, inproc) -> None:
    inproc.start("safe", concurrency=4)
    _activate(client)
    waits = client.log.waits
    batch = client.dispatch([{"id": "d", "name": "echo", "arguments": {"text": "d"}}])
    waits._dropped_ms = 2**62  # as if inbox entries newer than the batch had been dropped
    waiter = batch._start_wait()
    assert not waiter.inbox
    assert waits.wait(waiter, 30)
    assert waiter.seen[batch.call_ids[0]]["status"] == "succeeded"


def test_a_record_naming_a_key_that_is_no_inbox_still_finishes(client: Client, inproc) -> None:
    """A Redis writer points ``notify`` at a hash, or outside the inbox keys: no copy, no error."""
    inproc.start("safe", concurrency=2)
    wrong_type = client.keys.wait_inbox("not-a-stream")
    client.redis.hset(wrong_type, "kept", "1")
    elsewhere = client.keys.call("elsewhere")
    ids = []
    for target in (wrong_type, elsewhere):
        batch = client.dispatch(
            [{"id": target, "name": "slow", "arguments": {"seconds": 0.3}}], run_id=target
        )
        client.redis.hset(client.keys.call(batch.call_ids[0]), "notify", target)
        ids.append((batch.run_id, batch.call_ids))
    for run_id, call_ids in ids:
        [result] = client.wait(call_ids, timeout=30, run_id=run_id)
        assert result.status is CallStatus.SUCCEEDED
    assert client.redis.hgetall(wrong_type) == {b"kept": b"1"}
    assert not client.redis.exists(elsewhere)


def test_calls_older_than_the_inbox_keeps_are_waited_on_through_their_run(
    client: Client, inproc
) -> None:
    inproc.start("safe", concurrency=2)
    _activate(client)
    waits = client.log.waits
    batch = client.dispatch([{"id": "o", "name": "echo", "arguments": {"text": "o"}}])
    batch.wait(timeout=30)
    # The same calls as if dispatched an hour ago: their inbox entries may be trimmed.
    old = f"{int((time.time() - INBOX_KEEP_SECONDS) * 1000)}-0"
    waiter = waits.join_inbox(batch.run_id, set(batch.call_ids), old, waits.inbox)
    assert not waiter.inbox
    assert waits.wait(waiter, 30)
    assert waiter.seen[batch.call_ids[0]]["status"] == "succeeded"


def test_the_scripts_copy_exactly_the_final_events_and_keep_them_as_long() -> None:
    source = (Path(results_pkg.__file__).parent / "lua" / "lib" / "emit.lua").read_text()
    table = re.search(r"local FINAL = \{(.*?)\}", source, re.S)
    assert table is not None
    assert set(re.findall(r"\['([a-z._]+)'\] = true", table.group(1))) == {
        e.value for e in FINAL_EVENTS
    }
    assert f"local INBOX_KEEP_MS = {INBOX_KEEP_SECONDS * 1000}\n" in source
