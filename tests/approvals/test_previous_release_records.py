"""Records a previous release left in Redis, read by this release's workers.

A rolling upgrade (docs/operations/upgrades.md) leaves calls a previous release approved
in Redis: approved and queued but not started when the workers are replaced, or approved by
an API replica of the previous release while the new workers already run (workers first,
then dispatchers). The release before digest_call (2b6d75e, 2026-11-26) signed its decisions
over ``digest_arguments`` (the arguments alone; the tool's name is signed beside it, as
``tool``). The record is written here as that release wrote it: the same DECIDE, then the
decision re-signed, with the same key, over the arguments' digest.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.approvals.conftest import executions, forge_queued, start_verifying
from toolq import CallStatus
from toolq.approvals.policy import digest_arguments
from toolq.signing import Signer

pytestmark = pytest.mark.e2e


def as_previous_release_signed(r, pair, call_id: str) -> None:
    """The call's stored decision as 2b6d75e signed it: digest of the arguments alone."""
    key = f"toolq:call:{call_id}"
    stored = json.loads(r.hget(key, "approval"))
    envelope = json.loads(r.hget(key, "envelope"))
    payload = {k: v for k, v in stored["payload"].items() if k not in ("v", "kind")}
    payload["digest"] = digest_arguments(envelope["arguments"])
    r.hset(key, "approval", json.dumps(Signer.from_text(pair.signing).sign("decision", **payload)))


def test_call_approved_by_the_previous_release_runs_after_the_workers_upgrade(
    approver, inproc, r, pair
):
    batch = approver.dispatch(
        [{"id": "u1", "name": "wipe", "arguments": {"target": "t"}}], principal="agent"
    )
    call_id = batch.call_ids[0]
    approver.approvals.approve(call_id, by="alice")  # no worker yet: the call waits queued
    as_previous_release_signed(r, pair, call_id)
    start_verifying(inproc, pair.verify)  # the upgraded worker, same verify key
    [result] = batch.wait(timeout=30)
    # It failed approval_unverified, "arguments differ from the ones approved": a person
    # approved exactly these arguments, and the call never ran.
    assert (result.status, result.error_type) == (CallStatus.SUCCEEDED, None), result.error
    assert executions(r, call_id) == 1


def test_call_queued_by_a_previous_release_rule_is_refused_as_such(approver, inproc, r, pair):
    # An old dispatcher (still running: dispatchers are upgraded after the workers) queues a
    # call under a sticky rule it signed as rules version 1 (no submitter, no tenant). The
    # upgraded worker refuses it, rightly; it said the signature was invalid or made by an
    # untrusted key, which reads as a forgery, while the key is trusted and the rule is
    # merely of the older version (docs/operations/upgrades.md, rules version 2).
    batch = approver.dispatch(
        [{"id": "u2", "name": "wipe", "arguments": {"target": "t"}}],
        principal="agent",
        run_id="old-rule",
    )
    call_id = batch.call_ids[0]
    payload = {
        "run_id": "old-rule",
        "rule": "always_approve",
        "tool": "wipe",
        "by": "alice",
        "ts": repr(time.time()),
        "v": 1,
        "kind": "rule",
    }
    signer = Signer.from_text(pair.signing)
    signed = {"payload": payload, "sig": signer.signature(payload)}  # as 2b6d75e signed it
    forge_queued(r, approver, call_id, approval=json.dumps(signed))
    start_verifying(inproc, pair.verify)
    [result] = batch.wait(timeout=30)
    assert result.error_type == "approval_unverified"
    assert executions(r, call_id) == 0
    assert "not made by a trusted key" not in (result.error or ""), result.error
    assert "signed by an earlier release of toolq (rule version 1" in (result.error or "")
