"""A signed sticky rule lets through its own run's calls, not another submitter's or tenant's.

A decision is bound to the call's submitter and tenant: a Redis writer who moves an approved
call to another submitter or tenant has it refused (``test_authority``). A call that runs by
a signed rule (``approve(..., always=True)``, mode ``auto``) must be held to the same: the
rule was granted to the run's owner, so a Redis writer (any agent process holding the
documented adapter setup: Redis credentials) must not run its own calls, for another
principal or tenant, with arguments of its choosing, under a rule an approver granted to
someone else. Each test performs the attack for real: a plain Redis client rewrites records,
and a worker with TOOLQ_APPROVAL_VERIFY_KEYS runs (or refuses) the call.
"""

from __future__ import annotations

import json

import pytest
import redis

from tests.approvals.conftest import Pair, executions, forge_queued, start_verifying
from tests.approvals.test_worker_verification import assert_refused, call
from tests.conftest import InProcess
from toolq import CallStatus, Client
from toolq.approvals.policy import RunRules
from toolq.errors import NotAuthorizedError
from toolq.keys import Keys

pytestmark = pytest.mark.e2e

KEYS = Keys()


def _sticky_run(approver: Client) -> None:
    """Run ``sticky`` of ``agent``, where alice approved ``wipe`` for the rest of the run."""
    first = approver.dispatch(call("wipe", "r0", target="a"), principal="agent", run_id="sticky")
    approver.approvals.approve(first.call_ids[0], by="alice", always=True)


def test_a_rule_approved_call_moved_to_another_submitter_or_tenant_is_refused(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    _sticky_run(approver)
    moved = {}
    for field, value in (("principal", "mallory"), ("tenant", "other")):
        batch = approver.dispatch(
            call("wipe", f"r-{field}", target="x"), principal="agent", run_id="sticky"
        )
        assert batch.calls[0].status is CallStatus.QUEUED  # by alice's signed rule
        call_id = batch.call_ids[0]
        key = KEYS.call(call_id)
        envelope = json.loads(r.hget(key, "envelope"))
        envelope[field] = value
        r.hset(key, "envelope", json.dumps(envelope))
        moved[field] = call_id
    start_verifying(inproc, pair.verify)
    assert_refused(approver, r, moved["principal"], "names another submitter")
    assert_refused(approver, r, moved["tenant"], "names another tenant")


def test_another_submitter_s_call_cannot_borrow_a_run_s_signed_rule(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    start_verifying(inproc, pair.verify)
    _sticky_run(approver)
    rule = approver.approvals.rules("sticky").signatures["always_approve:wipe"]
    # mallory's own gated call, in her own run, for another tenant: parked, nobody approves.
    mine = approver.dispatch(
        call("wipe", "m1", target="mallory's choice"),
        principal="mallory",
        run_id="mine",
        tenant="other",
    )
    call_id = mine.call_ids[0]
    assert mine.calls[0].status is CallStatus.AWAITING_APPROVAL
    # A Redis writer moves it into the run the rule names and attaches the rule.
    key = KEYS.call(call_id)
    envelope = json.loads(r.hget(key, "envelope"))
    envelope["run_id"] = "sticky"
    r.hset(key, mapping={"envelope": json.dumps(envelope), "run_id": "sticky"})
    forge_queued(r, approver, call_id, approval=json.dumps(rule))
    assert_refused(approver, r, call_id, "names another")


def test_an_admin_s_call_in_a_run_of_mode_auto_waits_for_a_person(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    """Mode ``auto`` is signed for the run owner's calls: an admin's call in that run was
    queued by it and then refused by every verifying worker (``approval_unverified``, a
    failure nobody could approve away). It now waits for an approver, as in a run without
    the mode, and runs once one approves it."""
    start_verifying(inproc, pair.verify)
    approver.dispatch(call("echo", "m0", text="hi"), principal="agent", run_id="auto-run")
    approver.approvals.set_rules("auto-run", mode="auto", by="alice", principal="agent")
    owners = approver.dispatch(call("wipe", "m1", target="a"), principal="agent", run_id="auto-run")
    assert owners.calls[0].status is CallStatus.QUEUED  # the owner's: by the signed mode
    assert owners.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    admins = approver.dispatch(
        call("wipe", "m2", target="b"), principal="root", admin=True, run_id="auto-run"
    )
    assert admins.calls[0].status is CallStatus.AWAITING_APPROVAL
    approver.approvals.approve(admins.call_ids[0], by="alice")
    assert admins.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    assert executions(r, admins.call_ids[0]) == 1


def test_rules_set_before_the_run_s_first_call_are_its_owner_s(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    """Mode ``auto`` set (or a state restored) on a run with no call yet claims the run for
    the principal asking: the rule is signed for it, and its calls then run."""
    start_verifying(inproc, pair.verify)
    approver.approvals.set_rules("fresh-auto", mode="auto", by="alice", principal="agent")
    approver.approvals.restore_state(
        "fresh-kept", {"always_approve": ["wipe"]}, by="alice", principal="agent"
    )
    for run_id in ("fresh-auto", "fresh-kept"):
        batch = approver.dispatch(
            call("wipe", f"f-{run_id}", target="z"), principal="agent", run_id=run_id
        )
        assert batch.calls[0].status is CallStatus.QUEUED
        assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED


def test_a_sticky_rule_granted_on_an_admin_s_call_is_the_run_owner_s(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    """alice approves an admin's call in agent's run with "always in this run" (the
    dashboard's checkbox): the rule is the run's, so it is signed for the run's owner, whose
    calls the dispatcher applies it to. Before, it was signed for the admin and replaced the
    owner's signature: agent's next call was queued by the rule and refused by the worker
    (``approval_unverified``), a failure no approver could undo."""
    start_verifying(inproc, pair.verify)
    first = approver.dispatch(call("wipe", "a0", target="a"), principal="agent", run_id="adm")
    approver.approvals.approve(first.call_ids[0], by="alice")
    assert first.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    admins = approver.dispatch(
        call("wipe", "a1", target="b"), principal="root", admin=True, run_id="adm"
    )
    assert admins.calls[0].status is CallStatus.AWAITING_APPROVAL
    approver.approvals.approve(admins.call_ids[0], by="alice", always=True)
    assert admins.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    signed = approver.approvals.rules("adm").signatures["always_approve:wipe"]["payload"]
    assert (signed["submitter"], signed["tenant"]) == ("agent", "default")
    owners = approver.dispatch(call("wipe", "a2", target="c"), principal="agent", run_id="adm")
    assert owners.calls[0].status is CallStatus.QUEUED
    assert owners.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    assert executions(r, owners.call_ids[0]) == 1
    again = approver.dispatch(
        call("wipe", "a3", target="d"), principal="root", admin=True, run_id="adm"
    )
    assert again.calls[0].status is CallStatus.AWAITING_APPROVAL  # the owner's rule only


def test_an_admin_s_loosening_rule_on_a_run_nobody_owns_is_refused(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    """An admin sets mode ``auto`` (or restores a sticky approval) on a run with no call yet:
    an admin does not claim the run, so the rule had nobody to be signed for (submitter
    None), and the calls of whoever then claimed the run were queued by it and refused by
    every worker. It is refused, nothing is stored, and the owner's call waits for a person."""
    start_verifying(inproc, pair.verify)
    with pytest.raises(NotAuthorizedError, match="has no owner yet"):
        approver.approvals.set_rules("unowned", mode="auto", by="alice", admin=True)
    with pytest.raises(NotAuthorizedError, match="has no owner yet"):
        approver.approvals.restore_state(
            "unowned", {"always_approve": ["wipe"]}, by="alice", admin=True
        )
    assert approver.approvals.rules("unowned") == RunRules()
    batch = approver.dispatch(call("wipe", "u1", target="z"), principal="agent", run_id="unowned")
    assert batch.calls[0].status is CallStatus.AWAITING_APPROVAL
    # once the run has its owner, the admin's rule is signed for it, and its calls run
    approver.approvals.set_rules("unowned", mode="auto", by="alice", admin=True)
    later = approver.dispatch(call("wipe", "u2", target="y"), principal="agent", run_id="unowned")
    assert later.calls[0].status is CallStatus.QUEUED
    assert later.wait(timeout=30)[0].status is CallStatus.SUCCEEDED


def test_a_rule_granted_to_a_run_s_former_owner_parks_the_new_owner_s_calls(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    """A run's owner key expired while its rules stayed; another principal then claims the
    run id. The former owner's signed mode ``auto`` and sticky approval are not the new
    owner's: its calls park for a person (before, they were queued by those rules and
    every verifying worker failed them, ``approval_unverified``)."""
    start_verifying(inproc, pair.verify)
    _sticky_run(approver)  # agent's run, alice's sticky approval of wipe
    approver.approvals.set_rules("sticky", mode="auto", by="alice", principal="agent")
    r.delete(KEYS.run_owner("sticky"))  # what its expiry does
    batch = approver.dispatch(call("wipe", "r-new", target="n"), principal="eve", run_id="sticky")
    assert batch.calls[0].status is CallStatus.AWAITING_APPROVAL
    approver.approvals.approve(batch.call_ids[0], by="alice")
    assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED


def test_a_rule_past_its_age_lets_no_call_through(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    """A sticky "always" lasts ``TOOLQ_RULE_SECONDS``, not as long as the run: a rule signed
    two days ago (a run that long, or a Redis writer keeping an old signed rule in the run's
    settings) no longer queues the run's calls, and no worker runs a call by it."""
    start_verifying(inproc, pair.verify)
    _sticky_run(approver)
    rules = approver.approvals.rules("sticky")
    payload = dict(rules.signatures["always_approve:wipe"]["payload"])
    payload.pop("v"), payload.pop("kind")
    payload["ts"] = repr(float(payload["ts"]) - 2 * 24 * 3600)
    old = approver.approvals.signer.sign("rule", **payload)  # as signed two days ago
    state = json.loads(r.get(KEYS.run_settings("sticky")))
    state["signatures"]["always_approve:wipe"] = old
    r.set(KEYS.run_settings("sticky"), json.dumps(state))

    batch = approver.dispatch(call("wipe", "r-old", target="x"), principal="agent", run_id="sticky")
    assert batch.calls[0].status is CallStatus.AWAITING_APPROVAL  # the dispatcher: too old
    call_id = batch.call_ids[0]
    forge_queued(r, approver, call_id, approval=json.dumps(old))  # a Redis writer: queued
    assert_refused(approver, r, call_id, "older than TOOLQ_RULE_SECONDS")

    # Approving with "always" again renews the rule: the next call runs by it.
    again = approver.dispatch(call("wipe", "r-new", target="y"), principal="agent", run_id="sticky")
    approver.approvals.approve(again.call_ids[0], by="alice", always=True)
    assert again.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    renewed = approver.dispatch(call("wipe", "r-2", target="z"), principal="agent", run_id="sticky")
    assert renewed.calls[0].status is CallStatus.QUEUED
    assert renewed.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
