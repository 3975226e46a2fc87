"""A message taken off its queue and never recorded as unacknowledged is not a lost call.

kombu's Redis transport ``BRPOP``s a message and then, in a second command, records it in
its ``unacked`` hash. A consumer that dies in between (or Redis, replaying an AOF that
holds the pop and not the record) leaves the message in no queue and no unacked entry.
Here a child process performs that pop (``RPOP``, as the AOF propagates ``BRPOP``) and is
SIGKILLed; the sweeper of a real ``toolq worker`` must find the call and send it again
(``Sweeper.resend_lost``), and must leave alone calls merely waiting behind a backlog.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import redis

from tests.conftest import Workers
from toolq import CallStatus, Client, Settings
from toolq.keys import KOMBU_UNACKED, Keys

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

REDELIVER_AFTER = "2"
POP_AND_DIE = """
import os, signal, sys
import redis
taken = redis.Redis.from_url(sys.argv[1]).rpop(sys.argv[2], int(sys.argv[3]))
print("took" if taken else "empty", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def pop_and_die(url: str, queue: str, count: int = 1) -> None:
    """Take the oldest messages of ``queue`` in a process that dies before recording them."""
    proc = subprocess.run(
        [sys.executable, "-c", POP_AND_DIE, url, queue, str(count)],
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip() == "took" and proc.returncode == -9, proc


def wait_final(client: Client, call_id: str, timeout: float = 40) -> float:
    """Seconds until the call left ``queued``/``running``; fails past ``timeout``."""
    start = time.monotonic()
    while client.result(call_id).status in (CallStatus.QUEUED, CallStatus.RUNNING):
        assert time.monotonic() - start < timeout, f"call still {client.result(call_id).status}"
        time.sleep(0.1)
    return time.monotonic() - start


def test_message_popped_and_never_recorded_is_sent_again(
    r: redis.Redis, client: Client, workers: Workers
) -> None:
    keys = Keys()
    batch = client.dispatch([{"id": "a", "name": "echo", "arguments": {"text": "x"}}])
    call_id = batch.call_ids[0]
    pop_and_die(client.settings.redis_url, "toolq.safe")
    assert r.llen("toolq.safe") == 0 and r.hlen(KOMBU_UNACKED) == 0
    assert r.zscore(keys.queued, call_id) is not None  # queued, in the index, message gone

    workers.start("safe", TOOLQ_REDELIVER_AFTER=REDELIVER_AFTER)
    recovery = wait_final(client, call_id)
    assert client.result(call_id).status is CallStatus.SUCCEEDED
    assert int(r.hget(keys.call(call_id), "push_seq")) == 2  # sent once more, exactly
    assert r.zscore(keys.queued, call_id) is None  # START took it out of the index
    print(f"stranded call recovered in {recovery:.1f} s")


def test_approved_call_whose_message_was_lost_runs(
    r: redis.Redis, client: Client, workers: Workers
) -> None:
    batch = client.dispatch([{"id": "t", "name": "transfer", "arguments": {"amount": 500}}])
    call_id = batch.call_ids[0]
    assert client.result(call_id).status is CallStatus.AWAITING_APPROVAL
    client.approvals.approve(call_id, by="alice")  # DECIDE pushes the message
    assert r.llen("toolq.moderate") == 1
    pop_and_die(client.settings.redis_url, "toolq.moderate")
    assert r.hlen(KOMBU_UNACKED) == 0

    workers.start("moderate", TOOLQ_REDELIVER_AFTER=REDELIVER_AFTER)
    wait_final(client, call_id)
    assert client.result(call_id).status is CallStatus.SUCCEEDED


def test_calls_waiting_behind_a_backlog_are_not_sent_again(
    r: redis.Redis, settings: Settings, workers: Workers
) -> None:
    from tests.apps import registry

    keys = Keys()
    # One message per call: 60 messages in the backlog.
    client = Client(registry, settings.model_copy(update={"calls_per_message": 1}))
    # A worker that sweeps but consumes only ``dangerous``: the safe queue stays a backlog.
    workers.start("dangerous", TOOLQ_REDELIVER_AFTER="1")
    batch = client.dispatch(
        [{"id": f"e{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(60)]
    )
    first = batch.call_ids[0]
    pop_and_die(client.settings.redis_url, "toolq.safe")  # the oldest: the first call
    assert r.llen("toolq.safe") == 59

    deadline = time.monotonic() + 30
    while int(r.hget(keys.call(first), "push_seq")) == 1:
        assert time.monotonic() < deadline, "the lost call was not sent again"
        time.sleep(0.1)
    time.sleep(4)  # several more sweeps, all 59 others past the threshold meanwhile

    # Only the lost call was pushed again; the 59 waiting ones were examined and left alone.
    assert int(r.get(keys.queue_pushes("toolq.safe"))) == 61
    assert r.llen("toolq.safe") == 60
    seqs = [int(r.hget(keys.call(c), "push_seq")) for c in batch.call_ids]
    assert seqs == [61, *range(2, 61)]
    assert not r.keys(keys.lost_suspect("*"))
    assert all(s is CallStatus.QUEUED for s in client.store.statuses(batch.call_ids))

    workers.start("safe")
    assert all(res.status is CallStatus.SUCCEEDED for res in batch.wait(timeout=60))
    assert r.zcard(keys.queued) == 0
    client.close()


def executions(r: redis.Redis, call_id: str) -> int:
    return int(r.llen(f"test:exec:{call_id}"))


def test_a_lost_shared_message_is_sent_again_call_by_call(
    r: redis.Redis, client: Client, workers: Workers
) -> None:
    """A message carrying four calls is lost; one of them was cancelled meanwhile.

    Each call still queued is sent again alone (``toolq.execute``), with its own push
    sequence number; the cancelled one is not, and nothing runs twice.
    """
    keys = Keys()
    batch = client.dispatch(
        [{"id": f"s{i}", "name": "slow", "arguments": {"seconds": 0}} for i in range(4)]
    )
    calls = batch.call_ids
    assert r.llen("toolq.safe") == 1  # one message carries all four
    client.cancel(calls[1])
    pop_and_die(client.settings.redis_url, "toolq.safe")
    assert r.llen("toolq.safe") == 0 and r.hlen(KOMBU_UNACKED) == 0

    workers.start("safe", TOOLQ_REDELIVER_AFTER=REDELIVER_AFTER)
    for call_id in calls:
        wait_final(client, call_id)
    statuses = [client.result(c).status for c in calls]
    assert statuses == [CallStatus.SUCCEEDED, CallStatus.CANCELLED, *[CallStatus.SUCCEEDED] * 2]
    assert [executions(r, c) for c in calls] == [1, 0, 1, 1]
    seqs = sorted(int(r.hget(keys.call(c), "push_seq")) for c in (calls[0], *calls[2:]))
    assert seqs == [2, 3, 4]  # each sent again alone, once
    assert int(r.hget(keys.call(calls[1]), "push_seq")) == 1
    assert r.zcard(keys.queued) == 0


def blocked_pops(r: redis.Redis) -> list[str]:
    """Ids of the connections Redis holds blocked in a pop (``BRPOP``)."""
    return [c["id"] for c in r.client_list() if c.get("cmd") == "brpop" and "b" in c["flags"]]


def test_a_shared_message_lost_after_some_calls_ran_resends_only_the_rest(
    r: redis.Redis, client: Client, workers: Workers, wait_for: Callable[..., None]
) -> None:
    """Two deliveries of one shared message: the first runs, the copy is lost.

    The copy's calls are final by then: the lost-message check looks at each call and sends
    none of them again. A call lost beside the copy is sent again: the check did run.
    """
    keys = Keys()
    batch = client.dispatch(
        [{"id": f"s{i}", "name": "slow", "arguments": {"seconds": 0}} for i in range(3)]
    )
    message = r.lindex("toolq.safe", 0)
    worker = workers.start("safe", TOOLQ_REDELIVER_AFTER=REDELIVER_AFTER)
    assert [x.status for x in batch.wait(timeout=20)] == [CallStatus.SUCCEEDED] * 3
    wait_for(lambda: r.hlen(KOMBU_UNACKED) == 0, message="the message was never acknowledged")
    workers.kill9(worker)
    # The dead worker's BRPOP stays blocked until Redis reads its connection's close; a
    # message pushed before that is handed to the dead connection instead of the next RPOP.
    wait_for(lambda: not blocked_pops(r), message=f"pops still blocked: {blocked_pops(r)}")
    r.lpush("toolq.safe", message)  # a copy, then lost
    pop_and_die(client.settings.redis_url, "toolq.safe")
    probe = client.dispatch([{"id": "p", "name": "echo", "arguments": {"text": "p"}}])
    pop_and_die(client.settings.redis_url, "toolq.safe")
    pushes = int(r.get(keys.queue_pushes("toolq.safe")))
    workers.start("safe", TOOLQ_REDELIVER_AFTER="1")
    wait_final(client, probe.call_ids[0])  # found lost and sent again: the check ran
    assert client.result(probe.call_ids[0]).status is CallStatus.SUCCEEDED
    assert int(r.get(keys.queue_pushes("toolq.safe"))) == pushes + 1  # the probe's, alone
    assert [executions(r, c) for c in batch.call_ids] == [1, 1, 1]


def test_call_recovered_from_its_retry_backoff_and_then_lost_runs(
    r: redis.Redis, settings: object, workers: Workers
) -> None:
    """A worker dies while a call waits out its retry backoff; the re-sent message is lost.

    While it backs off the call is ``running`` under its lease, so the lease's expiry
    recovers it (an idempotent tool: queued again and re-sent). That message is then taken
    and never recorded; the lost-message check must send it once more.
    """
    from tests.chaos.lost_app import registry

    keys = Keys()
    app = {"TOOLQ_APP": "tests.chaos.lost_app:registry", "TOOLQ_REDELIVER_AFTER": "2"}
    runner = workers.start("safe", TOOLQ_RETRY_BACKOFF="8", **app)
    workers.start("dangerous", **app)  # sweeps, never takes a safe message
    with Client(registry, client_settings(settings)) as client:
        call_id = client.dispatch(
            [{"id": "f", "name": "flaky_idempotent", "arguments": {"failures": 1}}]
        ).call_ids[0]
        deadline = time.monotonic() + 30
        while r.llen(f"test:exec:{call_id}") < 1:  # first attempt failed: backing off now
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        workers.kill9(runner)
        while r.llen("toolq.safe") < 1:  # lease expired, recovered, re-sent
            assert time.monotonic() < deadline, client.result(call_id)
            time.sleep(0.05)
        assert client.result(call_id).status is CallStatus.QUEUED
        # The dead runner's unacked entry is re-sent too (``resend_stranded``), once: wait
        # for it, then lose every copy.
        time.sleep(3)
        pop_and_die(client.settings.redis_url, "toolq.safe", count=int(r.llen("toolq.safe")))
        assert r.llen("toolq.safe") == 0
        seq = int(r.hget(keys.call(call_id), "push_seq"))
        while int(r.hget(keys.call(call_id), "push_seq")) == seq:  # found lost, sent again
            assert time.monotonic() < deadline + 30
            time.sleep(0.1)
        workers.start("safe", **app)
        wait_final(client, call_id)
        assert client.result(call_id).status is CallStatus.SUCCEEDED
        assert r.llen(f"test:exec:{call_id}") == 2  # the failed attempt, then the good one


def client_settings(settings: object) -> Settings:
    assert isinstance(settings, Settings)
    return settings.model_copy(update={"app": "tests.chaos.lost_app:registry"})
