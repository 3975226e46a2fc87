"""Forged broker messages: pickle is refused unread, stale or unknown call ids never run."""

from __future__ import annotations

import os
import pickle
import time
import uuid
from pathlib import Path

import pytest

from toolq import CallEnvelope, CallStatus, EventType, RiskLevel
from toolq.broker import TASK_NAME
from toolq.results.store import NewCall

pytestmark = pytest.mark.e2e


class Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # what an attacker's pickle would run on load
        return (os.system, (f"touch {self.marker}",))


def unsent_call(client, name: str = "wipe", **arguments: object) -> str:
    """A queued call record whose message was never published (ids an attacker could guess)."""
    call_id = uuid.uuid4().hex
    envelope = CallEnvelope(
        call_id=call_id,
        run_id="forged",
        tool_call_id="x",
        name=name,
        arguments=arguments,
        risk=RiskLevel.SAFE,
    )
    client.store.create_many(
        [NewCall(envelope, CallStatus.QUEUED, EventType.QUEUED, {"status": "queued"})]
    )
    client.store.mark_sent([call_id])
    return call_id


def test_pickle_messages_are_refused_and_never_unpickled(client, workers, r, tmp_path: Path):
    workers.start("safe")
    marker = tmp_path / "pwned"
    call_id = unsent_call(client, target="x")
    payload = pickle.dumps(((call_id,), {}, {}))
    evil = pickle.dumps(Exploit(str(marker)))
    with client.celery.connection_for_write() as conn:
        producer = conn.Producer()
        for body in (payload, evil):
            producer.publish(
                body,
                routing_key="toolq.safe",
                exchange="toolq.safe",
                content_type="application/x-python-serialize",
                content_encoding="binary",
                headers={
                    "task": TASK_NAME,
                    "id": uuid.uuid4().hex,
                    "lang": "py",
                    "argsrepr": "",
                    "kwargsrepr": "",
                },
            )
    time.sleep(2.0)
    assert not marker.exists()
    assert client.result(call_id).status is CallStatus.QUEUED
    assert r.llen(f"test:exec:{call_id}") == 0
    # The same call sent the legitimate way (JSON) runs: the refusal was about the format.
    client.publisher.send(call_id, RiskLevel.SAFE)
    assert client.wait([call_id], timeout=20)[0].status is CallStatus.SUCCEEDED


def test_forged_json_messages_for_finished_or_unknown_calls_do_nothing(client, inproc, r):
    inproc.start("safe,dangerous")
    batch = client.dispatch([{"id": "f1", "name": "slow", "arguments": {"seconds": 0}}])
    [done] = batch.wait(timeout=20)
    assert done.status is CallStatus.SUCCEEDED
    for _ in range(3):
        client.publisher.send(done.call_id, RiskLevel.SAFE)  # replayed message
    client.publisher.send("no-such-call", RiskLevel.SAFE)
    client.celery.send_task(TASK_NAME, args=[{"not": "a call id"}], queue="toolq.safe")
    parked = client.dispatch([{"id": "f2", "name": "wipe", "arguments": {"target": "t"}}])
    client.publisher.send(parked.call_ids[0], RiskLevel.DANGEROUS)  # skip the approval?
    time.sleep(2.0)
    assert r.llen(f"test:exec:{done.call_id}") == 1
    assert client.result(done.call_id).status is CallStatus.SUCCEEDED
    assert client.result(parked.call_ids[0]).status is CallStatus.AWAITING_APPROVAL
    assert r.llen(f"test:exec:{parked.call_ids[0]}") == 0
    # and the worker (its consumer) is still healthy
    assert client.call("echo", {"text": "still here"}, timeout=20).output == {"text": "still here"}
