"""A rule's age bounds which calls it lets *start*, not the undo of one
that ran by it while it was young."""

from __future__ import annotations

import json
import time

import pytest
import redis

from tests.approvals.conftest import Pair, start_verifying
from tests.approvals.test_worker_verification import call
from tests.conftest import InProcess
from toolq import CallStatus, Client
from toolq.keys import Keys

pytestmark = pytest.mark.e2e

KEYS = Keys()
WORKER_RULE_SECONDS = 100.0  # the worker's TOOLQ_RULE_SECONDS (the default is a day)
SIGNED_AGO = 90.0  # the rule was signed this long before the call ran


def test_a_call_run_by_a_young_rule_can_still_be_undone_once_the_rule_is_old(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    """alice approved ``deploy`` with "always" in agent's run; a call it let through ran
    (the rule young enough, verified by the worker). Later (with the default: the call ran
    at hour 23 of the rule, the undo is asked at hour 25, within TOOLQ_UNDO_TTL) bob, an
    approver, reviews its undo data and asks for the undo: a person's signed undo of a
    call that was let through by a valid rule. The worker refused it, 'its call was not
    approved: the signed rule is older than TOOLQ_RULE_SECONDS': the rule's age, meant to
    bound which calls a sticky approval lets start, made the call un-undoable."""
    start_verifying(inproc, pair.verify, rule_seconds=WORKER_RULE_SECONDS)
    first = approver.dispatch(
        call("deploy", "d0", service="api", replicas=1), principal="agent", run_id="sticky-undo"
    )
    approver.approvals.approve(first.call_ids[0], by="alice", always=True)
    assert first.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    # the rule as it would be SIGNED_AGO seconds into its life (signed by the real key)
    rules = approver.approvals.rules("sticky-undo")
    payload = dict(rules.signatures["always_approve:deploy"]["payload"])
    payload.pop("v"), payload.pop("kind")
    signed_at = time.time() - SIGNED_AGO
    payload["ts"] = repr(signed_at)
    rule = approver.approvals.signer.sign("rule", **payload)
    state = json.loads(r.get(KEYS.run_settings("sticky-undo")))
    state["signatures"]["always_approve:deploy"] = rule
    r.set(KEYS.run_settings("sticky-undo"), json.dumps(state))

    batch = approver.dispatch(
        call("deploy", "d1", service="api", replicas=2), principal="agent", run_id="sticky-undo"
    )
    assert batch.calls[0].status is CallStatus.QUEUED  # by the rule
    [result] = batch.wait(timeout=30)
    assert result.status is CallStatus.SUCCEEDED, result.error  # the worker: rule young
    call_id = batch.call_ids[0]
    time.sleep(max(0.0, signed_at + WORKER_RULE_SECONDS + 1 - time.time()))  # the rule ages
    event = approver.undo(call_id, timeout=30, principal="agent", admin=True, approved_by="bob")
    assert event.type.value == "call.undone"
    assert call_id.encode() in r.lrange("test:undo:deploy", 0, -1)
