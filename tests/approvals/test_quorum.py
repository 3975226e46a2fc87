"""Quorum (TOOLQ_DANGEROUS_APPROVALS=2): what runs is what every required approver approved.

An edit by one approver replaces the arguments and resets the others' approvals; they must
approve the edited version, bound to its digest. Tested in both orders, through the Client,
with a verifying in-process worker that also requires two approvers.
"""

from __future__ import annotations

import threading

import pytest

from tests.approvals.conftest import deciding_client, executions, start_verifying
from toolq import CallStatus, EventType
from toolq.approvals.policy import digest_call
from toolq.errors import DigestMismatchError, NotAuthorizedError

pytestmark = pytest.mark.e2e


def wipe(call_id: str, target: str) -> list[dict[str, object]]:
    return [{"id": call_id, "name": "wipe", "arguments": {"target": target}}]


@pytest.fixture
def two(pair, r):
    with deciding_client(pair, dangerous_approvals=2) as c:
        yield c


@pytest.fixture
def verifying(inproc, pair):
    start_verifying(inproc, pair.verify, dangerous_approvals=2)
    return inproc


def test_first_approver_edits_then_second_approves_the_edit(two, verifying, r):
    batch = two.dispatch(wipe("q1", "production"), principal="agent")
    call_id = batch.call_ids[0]
    original = two.approvals.get(call_id).digest
    two.approvals.approve(call_id, by="alice", arguments={"target": "staging"})
    shown = two.approvals.get(call_id)
    assert shown.status is CallStatus.AWAITING_APPROVAL
    assert shown.arguments == {"target": "staging"} and shown.approvals == ["alice"]
    assert shown.digest == digest_call("wipe", {"target": "staging"}) != original
    with pytest.raises(DigestMismatchError):  # bob reviewed the original: not what would run
        two.approvals.approve(call_id, by="bob", digest=original)
    two.approvals.approve(call_id, by="bob", digest=shown.digest)
    [result] = batch.wait(timeout=30)
    assert result.output == "wiped staging"
    assert executions(r, call_id) == 1
    assert two.approvals.get(call_id).approvals == ["alice", "bob"]


def test_second_approver_edit_resets_the_first_who_must_approve_again(two, verifying, r):
    batch = two.dispatch(wipe("q2", "staging"), principal="agent")
    call_id = batch.call_ids[0]
    two.approvals.approve(call_id, by="alice")
    two.approvals.approve(call_id, by="bob", arguments={"target": "PRODUCTION"})
    shown = two.approvals.get(call_id)
    # bob alone may not change what runs: alice approved "staging", not this.
    assert shown.status is CallStatus.AWAITING_APPROVAL
    assert shown.approvals == ["bob"] and shown.arguments == {"target": "PRODUCTION"}
    assert executions(r, call_id) == 0
    with pytest.raises(NotAuthorizedError, match="distinct approver"):
        two.approvals.approve(call_id, by="bob")
    two.approvals.approve(call_id, by="alice", digest=shown.digest)
    [result] = batch.wait(timeout=30)
    assert result.output == "wiped PRODUCTION"
    assert executions(r, call_id) == 1
    approved = [e.data for e in two.events(batch.run_id) if e.type is EventType.APPROVED]
    assert [(d["by"], d["approvals"], "edited_arguments" in d) for d in approved] == [
        ("alice", 1, False),
        ("bob", 1, True),
        ("alice", 2, False),
    ]


def test_racing_partial_approvals_both_count(two, verifying, r):
    batch = two.dispatch(wipe("q3", "x"), principal="agent")
    call_id = batch.call_ids[0]
    barrier = threading.Barrier(2)
    errors: list[Exception] = []

    def approve(who: str) -> None:
        barrier.wait()
        try:
            two.approvals.approve(call_id, by=who)
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=approve, args=(who,)) for who in ("alice", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    assert sorted(two.approvals.get(call_id).approvals) == ["alice", "bob"]


def test_worker_requires_its_own_quorum(pair, verifying, r):
    # A deciding process configured for one approver (or lying about it) signs a decision
    # with a single name: workers that require two refuse it.
    with deciding_client(pair, dangerous_approvals=1) as lax:
        batch = lax.dispatch(wipe("q4", "x"), principal="agent")
        lax.approvals.approve(batch.call_ids[0], by="alice")
        [result] = batch.wait(timeout=30)
    assert result.status is CallStatus.FAILED and result.error_type == "approval_unverified"
    assert "2 distinct approvers are needed" in (result.error or "")
    assert executions(r, batch.call_ids[0]) == 0


def test_rules_cannot_stand_in_for_a_quorum(pair, two, verifying, r):
    batch = two.dispatch(wipe("q5", "x"), principal="agent", run_id="sticky-q")
    with pytest.raises(NotAuthorizedError, match="cannot stand in"):
        two.approvals.approve(batch.call_ids[0], by="alice", always=True)
    with pytest.raises(NotAuthorizedError, match="approvers they need"):
        two.approvals.set_rules("sticky-q", mode="auto", by="alice", principal="agent")
    with pytest.raises(NotAuthorizedError, match="approvers they need"):
        two.approvals.restore_state(
            "sticky-q", {"always_approve": ["wipe"]}, by="alice", principal="agent"
        )
    assert two.result(batch.call_ids[0]).status is CallStatus.AWAITING_APPROVAL
    # A deciding process without the quorum setting signs a sticky rule: the workers, which
    # require two approvers, do not let it stand in for them.
    with deciding_client(pair) as lax:
        first = lax.dispatch(wipe("q6", "x"), principal="agent", run_id="lax")
        lax.approvals.approve(first.call_ids[0], by="alice", always=True)
        by_rule = lax.dispatch(wipe("q7", "y"), principal="agent", run_id="lax")
        assert by_rule.calls[0].status is CallStatus.QUEUED
        [result] = by_rule.wait(timeout=30)
    assert result.error_type == "approval_unverified"
    assert "cannot stand in for the 2 approvers" in (result.error or "")
    assert executions(r, by_rule.call_ids[0]) == 0


def test_an_approver_removed_since_they_approved_no_longer_counts(pair, verifying, r):
    """alice approves a DANGEROUS call (quorum 2), then is removed from TOOLQ_APPROVERS
    (the API restarted with the new list): bob's approval is the first that counts, not the
    second (before, alice's stood and bob's ran the call); carol's completes the quorum."""
    everyone = {who: ["dangerous"] for who in ("alice", "bob", "carol")}
    with deciding_client(pair, dangerous_approvals=2, approvers=everyone) as before:
        batch = before.dispatch(wipe("q8", "x"), principal="agent")
        call_id = batch.call_ids[0]
        before.approvals.approve(call_id, by="alice")
    without_alice = {who: ["dangerous"] for who in ("bob", "carol")}
    with deciding_client(pair, dangerous_approvals=2, approvers=without_alice) as after:
        assert after.approvals.get(call_id).approvals == []  # hers is not shown as counting
        after.approvals.approve(call_id, by="bob")
        assert after.result(call_id).status is CallStatus.AWAITING_APPROVAL
        assert after.approvals.get(call_id).approvals == ["bob"]
        assert executions(r, call_id) == 0
        after.approvals.approve(call_id, by="carol")
        [result] = batch.wait(timeout=30)
    assert result.status is CallStatus.SUCCEEDED
    assert executions(r, call_id) == 1
    [decided] = [e.data for e in before.events(batch.run_id) if e.type is EventType.APPROVED][-1:]
    assert decided["by"] == "carol" and decided["approvals"] == 2
