"""One ``Client`` serves any number of threads waiting for results over a few connections."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from toolq import Client
from toolq.errors import WaitTimeoutError
from toolq.models import CallStatus

THREADS = 300
MAX_CONNECTIONS = 20


def redis_connections(port: int) -> set[tuple[str, int]]:
    """This process's open TCP connections to the Redis on ``port``, by local address.

    By address, not a count: connections earlier tests of this process left open can close
    (garbage collected) while the test counts, and must not hide the new ones.
    """
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    }


def test_300_threads_wait_on_one_client_over_few_connections(settings, workers) -> None:
    from tests.apps import registry

    workers.start("safe", pool="threads", concurrency=16)
    port = int(settings.redis_url.rsplit(":", 1)[1].split("/")[0])
    before = redis_connections(port)
    errors: list[BaseException] = []
    outcomes: list[CallStatus] = []
    start = threading.Barrier(THREADS + 1)
    peak = 0
    with Client(registry, settings) as client:

        def conversation(i: int) -> None:
            try:
                start.wait(30)
                # Each thread parks in wait on a call that takes a moment, so all of them
                # wait at once.
                batch = client.dispatch(
                    [{"id": f"c{i}", "name": "slow", "arguments": {"seconds": 0.1}}]
                )
                [result] = batch.wait(timeout=60)
                outcomes.append(result.status)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=conversation, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        start.wait(30)
        deadline = time.monotonic() + 90
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            peak = max(peak, len(redis_connections(port) - before))
            time.sleep(0.02)
        for t in threads:
            t.join(5)
        peak_waiting = peak
    assert not errors, f"{len(errors)} threads failed, e.g. {errors[0]!r}"
    assert outcomes == [CallStatus.SUCCEEDED] * THREADS
    assert 0 < peak_waiting <= MAX_CONNECTIONS, peak_waiting


def test_waits_keep_their_timeouts_and_results_with_many_runs(client: Client, inproc) -> None:
    """A waiter that times out leaves; the others on the same reader still get theirs."""
    inproc.start("safe", concurrency=4)
    slow = client.dispatch([{"id": "s", "name": "slow", "arguments": {"seconds": 2}}])
    quick = [
        client.dispatch([{"id": f"q{i}", "name": "echo", "arguments": {"text": str(i)}}])
        for i in range(5)
    ]
    with pytest.raises(WaitTimeoutError) as raised:
        slow.wait(timeout=0.3)
    assert raised.value.details["pending"] == slow.call_ids
    for i, batch in enumerate(quick):
        [result] = batch.wait(timeout=30)
        assert result.output == {"text": str(i)}
    assert client.wait(slow.call_ids, timeout=30)[0].status is CallStatus.SUCCEEDED
    assert client.log.waits.waiting == 0


def test_a_waiter_joining_behind_the_readers_cursor_reads_what_it_missed(
    client: Client, inproc, wait_for
) -> None:
    """The reader follows a run past a call's final event; a wait from before it still ends."""
    inproc.start("safe", concurrency=4)
    first = client.dispatch([{"id": "a", "name": "slow", "arguments": {"seconds": 1.5}}])
    waiting = threading.Thread(target=first.wait, kwargs={"timeout": 30})
    waiting.start()
    wait_for(lambda: client.log.waits.waiting == 1)
    start = client.log.read(first.run_id)[0].id
    quick = client.dispatch(
        [{"id": "b", "name": "echo", "arguments": {"text": "b"}}], run_id=first.run_id
    )
    wait_for(lambda: client.result(quick.call_ids[0]).status is CallStatus.SUCCEEDED)
    newest = client.log.last_id(first.run_id)
    # Let the reader, which follows the run for ``a``, move its cursor past b's end.
    wait_for(lambda: client.log.waits._runs[first.run_id].cursor == newest)
    seen = client.log.wait_final(first.run_id, quick.call_ids, 5, after=start)
    assert seen[quick.call_ids[0]]["status"] == "succeeded"
    waiting.join(30)
    assert not waiting.is_alive()
