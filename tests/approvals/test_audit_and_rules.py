"""Signed audit entries checked by `toolq approvals verify-audit`; loosening rules need an
approver and are signed."""

from __future__ import annotations

import json

import pytest

from tests.approvals.conftest import deciding_client, forge_queued, start_verifying
from tests.cli.test_cli import toolq
from toolq import CallStatus
from toolq.errors import NotAuthorizedError

pytestmark = pytest.mark.e2e


def call(name: str, call_id: str, **arguments: object) -> list[dict[str, object]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


def verify_audit(settings, verify: str):
    done = toolq(
        "approvals", "verify-audit", "--json", settings=settings, TOOLQ_APPROVAL_VERIFY_KEYS=verify
    )
    return done.returncode, json.loads(done.stdout)


def test_verify_audit_counts_and_detects_tampering(pair, inproc, r):
    strict = deciding_client(pair, approvers={"alice": ["dangerous"], "bob": ["moderate"]})
    start_verifying(inproc, pair.verify)
    batch = strict.dispatch(
        call("wipe", "a1", target="x")
        + call("wipe", "a2", target="y")
        + call("wipe", "a3", target="z"),
        principal="agent",
    )
    a1, a2, a3 = batch.call_ids
    with pytest.raises(NotAuthorizedError):
        strict.approvals.approve(a1, by="bob")  # refusal, signed in Python
    strict.approvals.approve(a1, by="alice")  # signed inside DECIDE
    strict.approvals.deny(a2, by="alice", reason="no")
    forge_queued(r, strict, a3)  # worker: system entry
    strict.wait(batch.call_ids, timeout=30)
    assert strict.result(a3).error_type == "approval_unverified"
    code, report = verify_audit(strict.settings, pair.verify)
    assert code == 0, report
    assert report["valid"] == 3 and report["unsigned_system"] == 1
    assert report["invalid"] == 0 and report["unsigned"] == 0

    # Wrong verify key: nothing verifies.
    from tests.approvals.conftest import Pair

    code, report = verify_audit(strict.settings, Pair().verify)
    assert code == 1 and report["invalid"] == 3

    # A Redis writer appends a copy of alice's approval entry naming someone else...
    [approved] = [f for _, f in r.xrange("toolq:audit") if f[b"outcome"] == b"approved"]
    r.xadd("toolq:audit", {**approved, b"by": b"mallory"})
    # ...an unsigned decision, and a decision dressed up as a system entry.
    forged = {k: v for k, v in approved.items() if k != b"sig"}
    r.xadd("toolq:audit", forged)
    r.xadd("toolq:audit", {**forged, b"system": b"1"})
    code, report = verify_audit(strict.settings, pair.verify)
    assert code == 1
    assert report["invalid"] == 1 and report["unsigned"] == 2 and report["valid"] == 3
    strict.close()


def test_verify_audit_needs_verify_keys(settings):
    done = toolq("approvals", "verify-audit", settings=settings)
    assert done.returncode == 2 and "TOOLQ_APPROVAL_VERIFY_KEYS is not set" in done.stderr


def test_loosening_rules_need_an_approver_and_are_signed(pair, r):
    c = deciding_client(pair, approvers={"alice": ["moderate", "dangerous"], "bob": ["moderate"]})
    rules = c.approvals
    with pytest.raises(NotAuthorizedError, match="mode auto"):
        rules.set_rules("r1", mode="auto")
    with pytest.raises(NotAuthorizedError, match="not allowed for dangerous"):
        rules.set_rules("r1", mode="auto", by="bob")
    assert rules.rules("r1").mode is None  # nothing written
    rules.set_rules("r1", mode="strict")  # tightening: no approver needed
    rules.set_rules("r1", approve_tools=["echo", "add"])
    with pytest.raises(NotAuthorizedError):
        rules.set_rules("r1", mode="permissive")
    with pytest.raises(NotAuthorizedError):
        rules.set_rules("r1", approve_tools=["echo"], by="mallory")
    rules.set_rules("r1", approve_tools=["echo"], by="bob")  # add is moderate: bob may
    signed = rules.set_rules("r1", mode="auto", by="alice")
    assert signed.signatures["mode_auto:*"]["payload"]["by"] == "alice"
    with pytest.raises(NotAuthorizedError):
        rules.restore_state("r2", {"always_approve": ["wipe"]})
    restored = rules.restore_state("r2", {"always_approve": ["wipe"]}, by="alice")
    assert restored.signatures["always_approve:wipe"]["payload"]["run_id"] == "r2"
    refusals = [f[b"outcome"] for _, f in r.xrange("toolq:audit")]
    assert b"refused:rule:no_principal" in refusals
    assert b"refused:rule:not_allowed_for_dangerous" in refusals
    batch = c.dispatch(call("wipe", "w1", target="x"), run_id="r2")  # r2's owner: None
    assert batch.calls[0].status is CallStatus.QUEUED
    carried = json.loads(r.hget(f"toolq:call:{batch.call_ids[0]}", "approval"))
    assert carried["payload"]["rule"] == "always_approve"
    c.close()
