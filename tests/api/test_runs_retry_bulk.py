"""``GET /v1/runs``, ``GET /v1/runs/{id}``, retry and bulk approve, over HTTP."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.api.conftest import h
from tests.api.test_approval_pages import park

pytestmark = pytest.mark.e2e


def test_runs_are_listed_newest_first_with_their_calls_by_status(api, client):
    client.dispatch(
        [{"id": "a1", "name": "nope", "arguments": {}}], run_id="r-old", principal="agent"
    )
    time.sleep(0.01)
    park(client, 2, run_id="r-mid")
    client.dispatch(
        [{"id": "e1", "name": "echo", "arguments": {"text": "x"}}],
        run_id="r-mid",
        principal="agent",
    )
    time.sleep(0.01)
    park(client, 1, run_id="r-acme", tenant="acme")
    got = httpx.get(f"{api}/v1/runs", headers=h("view-t"))
    assert got.status_code == 200, got.text
    runs = got.json()
    assert [r["run_id"] for r in runs] == ["r-acme", "r-mid", "r-old"]
    assert got.headers["X-Total-Count"] == "3" and "X-Next-Cursor" not in got.headers
    mid = runs[1]
    assert mid["owner"] == "agent" and mid["tenant"] == "default" and mid["calls"] == 3
    assert mid["statuses"] == {"awaiting_approval": 2, "queued": 1} and mid["counted"] == 3
    assert runs[2]["statuses"] == {"failed": 1}
    # paged, and a dispatch into an old run brings it to the front
    first = httpx.get(f"{api}/v1/runs", params={"limit": 2}, headers=h("view-t"))
    assert [r["run_id"] for r in first.json()] == ["r-acme", "r-mid"]
    rest = httpx.get(
        f"{api}/v1/runs",
        params={"limit": 2, "cursor": first.headers["X-Next-Cursor"]},
        headers=h("view-t"),
    )
    assert [r["run_id"] for r in rest.json()] == ["r-old"]
    assert "X-Next-Cursor" not in rest.headers
    # a tenant-bound caller sees its tenant's runs only
    own = httpx.get(f"{api}/v1/runs", headers=h("acme-view-t"))
    assert [r["run_id"] for r in own.json()] == ["r-acme"] and own.headers["X-Total-Count"] == "1"
    one = httpx.get(f"{api}/v1/runs/r-mid", headers=h("view-t"))
    assert one.status_code == 200 and one.json()["statuses"] == mid["statuses"]
    foreign = httpx.get(f"{api}/v1/runs/r-mid", headers=h("acme-view-t"))
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "not_owner"
    missing = httpx.get(f"{api}/v1/runs/no-such-run", headers=h("view-t"))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "run_not_found"


def test_a_runs_states_are_counted_over_its_newest_calls_only(api, client, monkeypatch):
    """A page of runs reads a bounded number of statuses, however many calls a run holds."""
    from toolq.results import runs

    park(client, 2, run_id="r-big")
    client.dispatch(
        [{"id": f"e{n}", "name": "echo", "arguments": {"text": "x"}} for n in range(3)],
        run_id="r-big",
        principal="agent",
    )
    monkeypatch.setattr(runs, "STATUS_READ", 3)
    [big] = httpx.get(f"{api}/v1/runs", headers=h("view-t")).json()
    assert big["calls"] == 5 and big["counted"] == 3
    assert big["statuses"] == {"queued": 3}  # the three newest calls


def test_retry_dispatches_a_linked_new_call_through_the_gate_again(api, client):
    [denied] = park(client, 1, run_id="r-retry")
    client.approvals.deny(denied, "alice", "not now")
    got = httpx.post(f"{api}/v1/calls/{denied}/retry", headers=h("agent-t"))
    assert got.status_code == 202, got.text
    new = got.json()
    assert new["call_id"] != denied and new["retry_of"] == denied
    assert new["status"] == "awaiting_approval"  # parked again: approval applies anew
    assert new["name"] == "wipe" and new["run_id"] == "r-retry"
    old = httpx.get(f"{api}/v1/calls/{denied}", headers=h("view-t")).json()
    assert old["retried_by"] == new["call_id"]
    assert client.approvals.get(new["call_id"]).arguments == {"target": "/tmp/x"}
    again = httpx.post(f"{api}/v1/calls/{denied}/retry", headers=h("agent-t"))
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_retryable"
    assert new["call_id"] in again.json()["error"]["message"]
    # a parked call is not final: nothing to retry yet
    pending = httpx.post(f"{api}/v1/calls/{new['call_id']}/retry", headers=h("agent-t"))
    assert pending.status_code == 409 and "not final" in pending.json()["error"]["message"]
    # only the run's owner (or an admin) retries; viewers may not at all
    other = httpx.post(f"{api}/v1/calls/{denied}/retry", headers=h("other-t"))
    assert other.status_code == 403
    viewer = httpx.post(f"{api}/v1/calls/{denied}/retry", headers=h("view-t"))
    assert viewer.status_code == 403
    unknown = httpx.post(f"{api}/v1/calls/nope/retry", headers=h("agent-t"))
    assert unknown.status_code == 404


def test_retry_of_a_failed_call_runs_again_and_a_succeeded_one_is_refused(api, client, inproc):
    inproc.start()
    batch = client.dispatch(
        [{"id": "f1", "name": "flaky", "arguments": {"failures": 99}}],
        run_id="r-fail",
        principal="agent",
    )
    [failed] = batch.wait(timeout=20)
    assert failed.status.value == "failed"
    got = httpx.post(f"{api}/v1/calls/{failed.call_id}/retry", headers=h("agent-t"))
    assert got.status_code == 202, got.text
    retried = got.json()
    # Dispatched anew, not parked: the status is read after the dispatch, so the in-process
    # worker may have taken the call already.
    assert retried["retry_of"] == failed.call_id and retried["status"] in {"queued", "running"}
    [again] = client.wait([retried["call_id"]], timeout=20, run_id="r-fail")
    assert again.status.value == "failed" and again.retry_of == failed.call_id  # ran again
    ok = client.call("echo", {"text": "hi"}, run_id="r-fail", principal="agent", timeout=20)
    assert ok.ok
    refused = httpx.post(f"{api}/v1/calls/{ok.call_id}/retry", headers=h("agent-t"))
    assert refused.status_code == 409 and "succeeded" in refused.json()["error"]["message"]


def shown(client, run_id: str) -> dict:
    """The body of a bulk approval of what the run's listing shows now."""
    listed = client.approvals.pending(run_id=run_id)
    return {"calls": [{"call_id": r.call_id, "digest": r.digest} for r in listed]}


def test_bulk_approve_decides_what_the_caller_may_and_leaves_the_rest(api, client):
    dangerous = park(client, 3, run_id="r-bulk")
    moderate = park(client, 2, run_id="r-bulk", tool="edit_file")
    elsewhere = park(client, 1, run_id="r-other")
    url = f"{api}/v1/runs/r-bulk/approvals/approve"
    body = shown(client, "r-bulk")
    # bob approves MODERATE calls only: the DANGEROUS ones stay parked, listed as refused
    got = httpx.post(url, headers=h("bob-t"), json=body)
    assert got.status_code == 200, got.text
    body = got.json()
    assert sorted(c["call_id"] for c in body["approved"]) == sorted(moderate)
    assert {c["status"] for c in body["approved"]} == {"queued"}
    assert sorted(r["call_id"] for r in body["refused"]) == sorted(dangerous)
    assert {r["code"] for r in body["refused"]} == {"forbidden"}
    # the submitter may not approve its own calls, even as an approver: nothing approved
    body = shown(client, "r-bulk")
    own = httpx.post(url, headers=h("self-t"), json=body)
    assert own.status_code == 403 and own.json()["error"]["code"] == "not_authorized"
    assert "own" in own.json()["error"]["message"] or "self" in own.json()["error"]["message"]
    # no approver role at all; another tenant's caller
    assert httpx.post(url, headers=h("view-t"), json=body).status_code == 403
    assert httpx.post(url, headers=h("acme-view-t"), json=body).status_code == 403
    assert {r.call_id for r in client.approvals.pending(run_id="r-bulk")} == set(dangerous)
    # alice approves the rest, with the same signed decisions as one by one
    done = httpx.post(url, headers=h("alice-t"), json=body).json()
    assert sorted(c["call_id"] for c in done["approved"]) == sorted(dangerous)
    assert done["refused"] == []
    for call_id in dangerous:
        record = client.store.records([call_id])[0]
        assert record["status"] == "queued" and record["decided_by"] == "alice"
    audit = [e for e in client.approvals.audit(1000) if e.call_id in dangerous]
    # the refusals of the submitter's own calls were audited as a single refusal is
    assert {e.outcome for e in audit} == {"approved", "refused:self_approval"}
    # the other run's call was not touched; calls no longer parked are refused as such
    assert client.approvals.get(elsewhere[0]).status.value == "awaiting_approval"
    again = httpx.post(url, headers=h("alice-t"), json=body).json()
    assert again["approved"] == []
    assert {r["code"] for r in again["refused"]} == {"not_awaiting_approval"}


def test_bulk_approve_approves_only_what_the_approver_was_shown(api, client, r):
    """A call parked after the listing the approver reviewed stays parked, and one whose
    arguments a Redis writer changed since is refused: the bulk approval signs nothing the
    approver did not see (before, it approved whatever the run held when it arrived)."""
    [seen, changed] = park(client, 2, run_id="r-shown")
    body = shown(client, "r-shown")
    [late] = park(client, 1, run_id="r-shown")  # the agent adds a call after the listing
    key = f"toolq:call:{changed}"
    envelope = json.loads(r.hget(key, "envelope"))
    envelope["arguments"] = {"target": "/production"}
    r.hset(key, "envelope", json.dumps(envelope))  # a Redis writer rewrites the arguments
    url = f"{api}/v1/runs/r-shown/approvals/approve"
    got = httpx.post(url, headers=h("alice-t"), json=body)
    assert got.status_code == 200, got.text
    assert [c["call_id"] for c in got.json()["approved"]] == [seen]
    assert got.json()["refused"] == [
        {"call_id": changed, "code": "digest_mismatch", "message": ANY_TEXT}
    ]
    pending = {p.call_id for p in client.approvals.pending(run_id="r-shown")}
    assert pending == {changed, late}
    # a body that lists nothing, or none at all, is refused: the approver names what they saw
    twice = {"calls": [body["calls"][0], body["calls"][0]]}
    extra = {"calls": body["calls"], "approve_everything": True}
    for bad in (None, {}, {"calls": []}, {"calls": [{"call_id": late}]}, twice, extra):
        refused = httpx.post(url, headers=h("alice-t"), json=bad)
        assert refused.status_code == 422, (bad, refused.text)
        assert "calls" in refused.text or "approve_everything" in refused.text
    assert {p.call_id for p in client.approvals.pending(run_id="r-shown")} == {changed, late}


def test_a_call_whose_tool_a_redis_writer_renamed_is_not_approved_as_shown(api, client, r):
    """The digest an approver reviews covers the tool as well as the arguments: a Redis
    writer who renames a parked call's tool (same arguments, same risk) between the view and
    the click gets a refusal, on the one-call route and in a bulk approval (before, the API
    signed the renamed call: the digest covered the arguments only)."""
    [one, other] = park(client, 2, run_id="r-renamed", tool="purge")
    seen = {p.call_id: p.digest for p in client.approvals.pending(run_id="r-renamed")}
    for call_id in (one, other):
        key = f"toolq:call:{call_id}"
        envelope = json.loads(r.hget(key, "envelope"))
        envelope["name"] = "hurry"  # dangerous too, no arguments: the approver's roles cover it
        r.hset(key, mapping={"envelope": json.dumps(envelope), "name": "hurry"})
    single = httpx.post(
        f"{api}/v1/approvals/{one}/approve", headers=h("alice-t"), json={"digest": seen[one]}
    )
    assert single.status_code == 409, single.text
    assert single.json()["error"]["code"] == "digest_mismatch"
    bulk = httpx.post(
        f"{api}/v1/runs/r-renamed/approvals/approve",
        headers=h("alice-t"),
        json={"calls": [{"call_id": other, "digest": seen[other]}]},
    )
    assert bulk.status_code == 200, bulk.text
    assert bulk.json()["approved"] == []
    assert [c["code"] for c in bulk.json()["refused"]] == ["digest_mismatch"]
    pending = client.approvals.pending(run_id="r-renamed")
    assert {p.call_id for p in pending} == {one, other}
    assert all(p.approvals == [] and p.digest != seen[p.call_id] for p in pending)


class _AnyText(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    __hash__ = str.__hash__


ANY_TEXT = _AnyText()
