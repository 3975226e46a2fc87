"""The signature carries the authority: risk, role, quorum and submitter never come from Redis.

Each test performs the attack for real: a plain Redis client (what every submitter holds)
rewrites a parked call's record, the real HTTP API, CLI or approval store decides, and a
worker with TOOLQ_APPROVAL_VERIFY_KEYS runs (or refuses) it. ``test:exec:<call_id>`` is the
ground truth of whether a handler ran.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
import redis

from tests.approvals.conftest import (
    Pair,
    audit_outcomes,
    deciding_client,
    executions,
    forge_queued,
    start_verifying,
)
from tests.approvals.test_worker_verification import assert_refused, call
from tests.cli.test_cli import toolq  # at import: see tests/conftest.py (CPython 3.11.7)
from tests.conftest import InProcess, approve_shown, make_settings, serve
from toolq import CallStatus, Client, RiskLevel, ToolContext, ToolRegistry
from toolq.api.app import create_app
from toolq.approvals.policy import digest_call
from toolq.errors import NotAuthorizedError
from toolq.keys import Keys
from toolq.settings import ApiToken
from toolq.signing import Signer

pytestmark = pytest.mark.e2e

KEYS = Keys()
TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "sam-t": ApiToken(principal="sam", roles=["viewer", "approver:safe"]),
    "alice-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"]),
    "alice-laptop-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"]),
    "bob-t": ApiToken(principal="bob", roles=["viewer", "approver:dangerous"]),
}


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def lower_risk(r: redis.Redis, call_id: str, risk: str = "safe") -> None:
    """What a Redis writer can do: rewrite a parked call's risk, in the record and envelope."""
    key = KEYS.call(call_id)
    envelope = json.loads(r.hget(key, "envelope"))
    envelope["risk"] = risk
    r.hset(key, mapping={"risk": risk, "envelope": json.dumps(envelope)})


def rewrite_envelope(r: redis.Redis, call_id: str, **changes: object) -> None:
    key = KEYS.call(call_id)
    envelope = json.loads(r.hget(key, "envelope"))
    envelope.update(changes)
    r.hset(key, "envelope", json.dumps(envelope))


def wait_final(api: str, call_id: str) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while True:
        found = httpx.get(f"{api}/v1/calls/{call_id}", headers=h("agent-t")).json()
        if found["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
            return dict(found)
        time.sleep(0.1)


def test_a_lowered_risk_in_the_record_does_not_lower_the_role_the_api_asks(
    pair: Pair, inproc: InProcess, r: redis.Redis
) -> None:
    from tests.apps import registry

    start_verifying(inproc, pair.verify)
    settings = make_settings(approval_signing_key=pair.signing)
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        sent = httpx.post(
            f"{api}/v1/runs/tamper/calls",
            json=call("wipe", "t1", target="prod"),
            headers=h("agent-t"),
        ).json()
        call_id = sent["calls"][0]["call_id"]
        approve = f"{api}/v1/approvals/{call_id}/approve"
        before = httpx.post(approve, json={}, headers=h("sam-t"))
        assert before.status_code == 403, before.text

        lower_risk(r, call_id)
        after = httpx.post(approve, json={}, headers=h("sam-t"))
        assert after.status_code == 403, after.text
        assert after.json()["error"]["code"] == "forbidden"
        denied = httpx.post(
            f"{api}/v1/approvals/{call_id}/deny", json={"reason": "x"}, headers=h("sam-t")
        )
        assert denied.status_code == 403
        shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("sam-t")).json()
        assert (shown["risk"], shown["status"]) == ("dangerous", "awaiting_approval")
        listed = httpx.get(f"{api}/v1/approvals", params={"risk": "safe"}, headers=h("sam-t"))
        assert call_id not in {p["call_id"] for p in listed.json()}

        # The approver the tool's real risk needs still decides it, and it runs.
        assert approve_shown(api, call_id, h("alice-t")).status_code == 200
        done = wait_final(api, call_id)
        assert done["status"] == "succeeded", done
        assert executions(r, call_id) == 1


def test_approvers_policy_and_quorum_take_the_risk_from_the_registry(
    pair: Pair, inproc: InProcess, r: redis.Redis
) -> None:
    start_verifying(inproc, pair.verify, dangerous_approvals=2)
    approvers = {"sam": ["safe"], "alice": ["dangerous"], "bob": ["dangerous"]}
    with deciding_client(pair, approvers=approvers, dangerous_approvals=2) as client:
        batch = client.dispatch(
            call("wipe", "q1", target="prod"), principal="agent", run_id="policy"
        )
        call_id = batch.call_ids[0]
        lower_risk(r, call_id)
        for always in (False, True):
            with pytest.raises(NotAuthorizedError, match="not allowed for dangerous"):
                client.approvals.approve(call_id, by="sam", always=always)
        decided = client.approvals.decide_run(
            "policy", "sam", approve=[call_id], deny={call_id: "no"}
        )
        assert isinstance(decided[call_id], NotAuthorizedError)
        # One approver is not a quorum, whatever the record says the risk is.
        assert client.approvals.approve(call_id, by="alice").status is CallStatus.AWAITING_APPROVAL
        assert client.approvals.rules("policy").signatures == {}
        assert client.approvals.approve(call_id, by="bob").status in (
            CallStatus.QUEUED,
            CallStatus.RUNNING,
            CallStatus.SUCCEEDED,
        )
        assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    assert executions(r, call_id) == 1
    assert (call_id, "sam", "refused:not_allowed_for_dangerous") in audit_outcomes(r)


def test_the_cli_without_the_registry_refuses_to_sign_for_a_guessed_risk(
    pair: Pair, settings, r: redis.Redis
) -> None:
    with deciding_client(pair) as client:
        batch = client.dispatch(call("wipe", "c1", target="prod"), principal="agent")
        digest = client.approvals.get(batch.call_ids[0]).digest
    call_id = batch.call_ids[0]
    lower_risk(r, call_id)
    env = {
        "TOOLQ_APPROVERS": json.dumps({"sam": ["safe"]}),
        "TOOLQ_APPROVAL_SIGNING_KEY": pair.signing,
    }
    refused = toolq("approvals", "approve", call_id, "--by", "sam", settings=settings, **env)
    assert refused.returncode == 1 and "pass --app" in refused.stderr
    assert r.hget(KEYS.call(call_id), "status") == b"awaiting_approval"
    with_app = toolq(
        "approvals",
        "approve",
        call_id,
        "--by",
        "sam",
        "--app",
        "tests.apps:registry",
        "--digest",
        digest,
        settings=settings,
        **env,
    )
    assert with_app.returncode == 1 and "not allowed for dangerous" in with_app.stderr
    assert r.hget(KEYS.call(call_id), "status") == b"awaiting_approval"


def test_the_cli_decides_a_moderate_call_by_its_tool_only_with_the_registry(
    pair: Pair, settings, inproc: InProcess, r: redis.Redis
) -> None:
    start_verifying(inproc, pair.verify)
    env = {"TOOLQ_APPROVAL_SIGNING_KEY": pair.signing}
    with deciding_client(pair) as client:
        blind, known = (
            client.dispatch(call("transfer", tool_call_id, amount=500), principal="agent")
            for tool_call_id in ("m1", "m2")
        )
        no_app = toolq("approvals", "approve", blind.call_ids[0], settings=settings, **env)
        assert no_app.returncode == 1 and "pass --app" in no_app.stderr
        assert len(no_app.stderr.strip().splitlines()) == 1, no_app.stderr
        assert r.hget(KEYS.call(blind.call_ids[0]), "status") == b"awaiting_approval"
        shown = client.approvals.get(known.call_ids[0]).digest
        with_app = toolq(
            "approvals",
            "approve",
            known.call_ids[0],
            "--app",
            "tests.apps:registry",
            "--digest",
            shown,
            settings=settings,
            **env,
        )
        assert with_app.returncode == 0, with_app.stderr
        assert known.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    assert executions(r, blind.call_ids[0]) == 0


def test_a_decision_signed_over_a_lowered_risk_does_not_run(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    start_verifying(inproc, pair.verify)
    # A deciding process whose registry says the tool is SAFE (an older deploy, or a Redis
    # writer's record) signs the risk it decided under; this worker's `wipe` is DANGEROUS.
    lowered = ToolRegistry()

    @lowered.tool("wipe", risk=RiskLevel.SAFE, requires_approval=True)
    def wipe(target: str, ctx: ToolContext) -> str:
        raise AssertionError("never runs here")

    batch = approver.dispatch(call("wipe", "l1", target="prod"), principal="agent")
    call_id = batch.call_ids[0]
    with Client(lowered, make_settings(approval_signing_key=pair.signing)) as stale:
        stale.approvals.approve(call_id, by="sam")
    assert_refused(approver, r, call_id, "decided as for a safe call", approved=True)

    # The same by hand: every fact right but the risk.
    second = approver.dispatch(call("wipe", "l2", target="prod"), principal="agent")
    forged = second.call_ids[0]
    envelope = json.loads(r.hget(KEYS.call(forged), "envelope"))
    signed = Signer.from_text(pair.signing).sign(
        "decision",
        call_id=forged,
        run_id=envelope["run_id"],
        tool="wipe",
        risk="safe",
        digest=digest_call(envelope["name"], envelope["arguments"]),
        submitter="agent",
        tenant="default",
        decision="approve",
        approvers=["sam"],
        by="sam",
        ts=repr(time.time()),
    )
    forge_queued(r, approver, forged, approval=json.dumps(signed))
    assert_refused(approver, r, forged, "decided as for a safe call")


def test_the_signed_submitter_and_tenant_must_be_the_record_s(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    rewrites = {
        "principal": ("someone-else", "names another submitter"),
        "tenant": ("other", "names another tenant"),
    }
    decided = {}
    for field, (value, _) in rewrites.items():
        batch = approver.dispatch(call("wipe", f"s-{field}", target="x"), principal="agent")
        call_id = batch.call_ids[0]
        approver.approvals.approve(call_id, by="alice")  # no worker yet: it waits queued
        rewrite_envelope(r, call_id, **{field: value})
        decided[field] = call_id
    start_verifying(inproc, pair.verify)
    for field, (_, reason) in rewrites.items():
        assert_refused(approver, r, decided[field], reason, approved=True)


def test_approvals_written_into_the_record_do_not_count_toward_a_quorum(
    pair: Pair, inproc: InProcess, r: redis.Redis
) -> None:
    start_verifying(inproc, pair.verify, dangerous_approvals=3)
    with deciding_client(pair, dangerous_approvals=3) as client:
        batch = client.dispatch(call("wipe", "f1", target="prod"), principal="agent")
        call_id = batch.call_ids[0]
        key = KEYS.call(call_id)
        shown = client.approvals.get(call_id).digest
        r.hset(
            key,
            "approvers",
            json.dumps(
                [
                    {"by": "mallory", "digest": shown, "ts": "1"},
                    {"by": "trent", "digest": shown, "ts": "1", "sig": "AAAA"},
                ]
            ),
        )
        assert client.approvals.get(call_id).approvals == []
        client.approvals.approve(call_id, by="alice")
        assert client.approvals.get(call_id).approvals == ["alice"]
        # A copy of alice's real, signed approval counts once.
        [alice] = json.loads(r.hget(key, "approvers"))
        r.hset(key, "approvers", json.dumps([alice, alice]))
        assert client.approvals.approve(call_id, by="bob").status is CallStatus.AWAITING_APPROVAL
        assert client.approvals.get(call_id).approvals == ["alice", "bob"]
        assert executions(r, call_id) == 0
        client.approvals.approve(call_id, by="carol")
        [result] = batch.wait(timeout=30)
    assert result.status is CallStatus.SUCCEEDED
    approval = json.loads(r.hget(key, "approval"))
    assert approval["payload"]["approvers"] == ["alice", "bob", "carol"]


def test_two_tokens_of_one_principal_are_one_approver_over_http(
    pair: Pair, inproc: InProcess, r: redis.Redis
) -> None:
    from tests.apps import registry

    start_verifying(inproc, pair.verify, dangerous_approvals=2)
    settings = make_settings(approval_signing_key=pair.signing, dangerous_approvals=2)
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        sent = httpx.post(
            f"{api}/v1/runs/two/calls", json=call("wipe", "w1", target="prod"), headers=h("agent-t")
        ).json()
        call_id = sent["calls"][0]["call_id"]
        first = approve_shown(api, call_id, h("alice-t"))
        assert first.status_code == 200 and first.json()["status"] == "awaiting_approval"
        again = approve_shown(api, call_id, h("alice-laptop-t"))
        assert again.status_code == 403 and "already approved" in again.json()["error"]["message"]
        assert executions(r, call_id) == 0
        assert approve_shown(api, call_id, h("bob-t")).status_code == 200
        assert wait_final(api, call_id)["status"] == "succeeded"
    assert executions(r, call_id) == 1


def test_a_decision_signed_before_the_upgrade_is_refused(
    approver: Client, inproc: InProcess, r: redis.Redis, pair: Pair
) -> None:
    start_verifying(inproc, pair.verify)
    batch = approver.dispatch(call("wipe", "v1", target="prod"), principal="agent")
    call_id = batch.call_ids[0]
    envelope = json.loads(r.hget(KEYS.call(call_id), "envelope"))
    # Version 1 bound neither the risk nor the submitter.
    payload = {
        "call_id": call_id,
        "run_id": envelope["run_id"],
        "tool": "wipe",
        "digest": digest_call(envelope["name"], envelope["arguments"]),
        "decision": "approve",
        "approvers": ["alice"],
        "by": "alice",
        "ts": repr(time.time()),
        "v": 1,
        "kind": "decision",
    }
    signed = {"payload": payload, "sig": Signer.from_text(pair.signing).signature(payload)}
    forge_queued(r, approver, call_id, approval=json.dumps(signed))
    # refused, and said to be of an earlier release (a trusted key signed it), not a forgery
    assert_refused(
        approver, r, call_id, "signed by an earlier release of toolq (decision version 1"
    )


def test_mode_auto_is_signed_only_for_an_approver_whatever_mode_redis_holds(
    pair: Pair, inproc: InProcess, r: redis.Redis
) -> None:
    start_verifying(inproc, pair.verify)
    approvers = {"alice": ["safe", "moderate", "dangerous"]}
    with deciding_client(pair, approvers=approvers) as client:
        r.set(KEYS.run_settings("auto-run"), json.dumps({"mode": "auto"}))
        with pytest.raises(NotAuthorizedError, match="not an approver"):
            client.approvals.set_rules("auto-run", mode="auto", by="mallory", principal="agent")
        assert client.approvals.rules("auto-run").signatures == {}
        batch = client.dispatch(
            call("wipe", "a1", target="prod"), run_id="auto-run", principal="agent"
        )
        assert batch.calls[0].status is CallStatus.QUEUED  # the dispatcher read mode auto
        assert_refused(client, r, batch.call_ids[0], "carries no signed approval")
        # An approver may still set it, and then the run's calls go through.
        client.approvals.set_rules("auto-run", mode="auto", by="alice", principal="agent")
        ok = client.dispatch(
            call("wipe", "a2", target="prod"), run_id="auto-run", principal="agent"
        )
        assert ok.wait(timeout=30)[0].status is CallStatus.SUCCEEDED


def test_undoing_needs_the_role_of_the_tool_s_risk_not_the_record_s(
    client: Client, r: redis.Redis
) -> None:
    batch = client.dispatch(call("deploy", "u1", service="api", replicas=2), principal="agent")
    call_id = batch.call_ids[0]
    lower_risk(r, call_id)
    assert client.undo_gate(call_id) is RiskLevel.DANGEROUS
