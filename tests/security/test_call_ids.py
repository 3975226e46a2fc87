"""A call id names one call: reusing a provider call id (or an idempotency key) for another
tool or other arguments is refused, and never hands back the call it already names.

The attack: turn 1 parks ``wipe(victim)`` under the provider id ``c1``; turn 2 of the same run
dispatches the ungated ``echo`` under ``c1``. Before, the dispatcher returned the parked call,
so whoever approved "the call ``c1``" for the echo approved the wipe.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest
import redis

from tests.conftest import InProcess, make_settings, serve
from toolq import CallStatus, Client, Settings
from toolq.api.app import create_app
from toolq.errors import CallIdConflictError
from toolq.keys import Keys
from toolq.secretbox import SecretBox
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"]),
}
KEYS = Keys()


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def one(call_id: str, name: str, **arguments: object) -> list[dict[str, object]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


def stored(r: redis.Redis) -> set[bytes]:
    """Every call record and idempotency claim in Redis."""
    return set(r.keys(KEYS.call("*"))) | set(r.keys(f"{KEYS.prefix}:idem:*"))


def test_reused_provider_id_over_http_is_refused_and_the_parked_call_untouched(
    settings: Settings, inproc: InProcess, r: redis.Redis
) -> None:
    from tests.apps import registry

    inproc.start()
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        url = f"{api}/v1/runs/turns/calls"
        parked = httpx.post(url, json=one("c1", "wipe", target="victim"), headers=h("agent-t"))
        assert parked.status_code == 202, parked.text
        [first] = parked.json()["calls"]
        assert first["status"] == "awaiting_approval"
        record_before = r.hgetall(KEYS.call(first["call_id"]))
        before = stored(r)

        for body in (one("c1", "echo", text="hello"), one("c1", "wipe", target="staging")):
            refused = httpx.post(url, json=body, headers=h("agent-t"))
            assert refused.status_code == 409, refused.text
            error = refused.json()["error"]
            assert error["code"] == "call_id_conflict"
            assert "c1" in error["message"]

        # Nothing created, decided or run; the parked call is exactly as it was.
        assert stored(r) == before
        assert r.hgetall(KEYS.call(first["call_id"])) == record_before
        assert r.lrange(KEYS.run_calls("turns"), 0, -1) == [first["call_id"].encode()]
        shown = httpx.get(f"{api}/v1/approvals/{first['call_id']}", headers=h("alice-t")).json()
        assert shown["status"] == "awaiting_approval" and shown["arguments"] == {"target": "victim"}

        # A retried identical dispatch is still the same call.
        again = httpx.post(url, json=one("c1", "wipe", target="victim"), headers=h("agent-t"))
        assert again.status_code == 202
        [dup] = again.json()["calls"]
        assert (dup["call_id"], dup["duplicate"]) == (first["call_id"], True)


def test_reused_client_idempotency_key_with_other_arguments_is_refused(
    client: Client, r: redis.Redis
) -> None:
    first = client.dispatch(
        one("a", "add", a=1, b=2), run_id="k", principal="agent", idempotency_key="req-1"
    )
    before = stored(r)
    with pytest.raises(CallIdConflictError) as refused:
        # another provider id, other arguments, the same client key (and position)
        client.dispatch(
            one("b", "add", a=1, b=3), run_id="k", principal="agent", idempotency_key="req-1"
        )
    assert refused.value.code == "call_id_conflict"
    assert refused.value.details["call_id"] == first.call_ids[0]
    assert stored(r) == before
    same = client.dispatch(
        one("a", "add", a=1, b=2), run_id="k", principal="agent", idempotency_key="req-1"
    )
    assert same.call_ids == first.call_ids and same.calls[0].duplicate


def test_in_a_batch_only_the_conflicting_call_fails_and_the_others_go_on(
    client: Client, inproc: InProcess, r: redis.Redis
) -> None:
    inproc.start()
    parked = client.dispatch(one("c1", "wipe", target="victim"), run_id="b", principal="agent")
    victim = parked.call_ids[0]
    victim_record = r.hgetall(KEYS.call(victim))
    batch = [
        {"id": "c1", "name": "echo", "arguments": {"text": "hi"}},
        {"id": "c2", "name": "echo", "arguments": {"text": "there"}},
    ]
    second = client.dispatch(batch, run_id="b", principal="agent")
    conflicting, fine = second.calls
    assert conflicting.call_id != victim and conflicting.status is CallStatus.FAILED
    assert fine.status is CallStatus.QUEUED
    results = second.wait(timeout=30)
    assert results[0].error_type == "call_id_conflict"
    assert "already names another call" in (results[0].error or "")
    assert results[1].status is CallStatus.SUCCEEDED and results[1].output == {"text": "there"}
    assert r.hgetall(KEYS.call(victim)) == victim_record
    # The model gets one tool result per tool call, the refusal included.
    messages = second.to_messages("openai")
    assert [m["tool_call_id"] for m in messages] == ["c1", "c2"]
    # Retried identically, the batch is the same calls (the refusal included).
    again = client.dispatch(batch, run_id="b", principal="agent")
    assert again.call_ids == second.call_ids and all(c.duplicate for c in again.calls)


def test_secret_arguments_compare_by_value_though_sealing_is_randomized(
    inproc: InProcess, r: redis.Redis
) -> None:
    from tests.apps import registry

    settings = make_settings(secrets_key=SecretBox.generate_key())
    with Client(registry, settings) as sealed:
        first = sealed.dispatch(
            one("s1", "login", user="root", password="hunter2"), run_id="s", principal="agent"
        )
        assert first.calls[0].status is CallStatus.AWAITING_APPROVAL
        same = sealed.dispatch(
            one("s1", "login", user="root", password="hunter2"), run_id="s", principal="agent"
        )
        assert same.call_ids == first.call_ids and same.calls[0].duplicate
        with pytest.raises(CallIdConflictError):
            sealed.dispatch(
                one("s1", "login", user="root", password="other"), run_id="s", principal="agent"
            )
    # The claim does not hold a plain hash of the secret: it is keyed by TOOLQ_SECRETS_KEY.
    [claim] = r.keys(f"{KEYS.prefix}:idem:*")
    assert b"hunter2" not in r.get(claim)


def test_racing_dispatches_of_one_id_create_exactly_one_call(
    settings: Settings, r: redis.Redis
) -> None:
    from tests.apps import registry

    racers = 8
    barrier = threading.Barrier(racers)
    outcomes: list[str] = []
    lock = threading.Lock()

    def race(n: int) -> None:
        with Client(registry, settings) as mine:
            barrier.wait()
            try:
                batch = mine.dispatch(
                    one("r1", "echo", text=f"racer {n}"), run_id="race", principal="agent"
                )
                got = batch.call_ids[0]
            except CallIdConflictError as exc:
                got = f"conflict:{exc.details['call_id']}"
        with lock:
            outcomes.append(got)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [o for o in outcomes if not o.startswith("conflict:")]
    assert len(winners) == 1, outcomes
    assert all(o == f"conflict:{winners[0]}" for o in outcomes if o not in winners)
    assert r.llen(KEYS.run_calls("race")) == 1
    envelope = json.loads(r.hget(KEYS.call(winners[0]), "envelope"))
    assert envelope["arguments"]["text"].startswith("racer ")
