"""The one-call approval over HTTP signs only the call the approver was shown.

The attack: an approver reviews a parked call (``GET /v1/approvals/{id}``), a Redis writer
then rewrites its arguments, and the approver's approval arrives. Without the digest of what
was shown it is refused (422, nothing written); with it, ``digest_mismatch``. Either way the
rewritten call stays parked and never runs.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
import redis

from tests.approvals.conftest import executions, start_verifying
from tests.conftest import InProcess, make_settings, serve
from toolq.api.app import create_app
from toolq.approvals.policy import digest_call
from toolq.dispatch.approval_client import ApprovalClient
from toolq.errors import DigestMismatchError, PayloadError
from toolq.keys import Keys
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"]),
}
ALICE = {"Authorization": "Bearer alice-t"}
KEYS = Keys()


def rewrite_arguments(r: redis.Redis, call_id: str, arguments: dict[str, object]) -> None:
    """What any Redis writer can do to a parked call: new arguments, and a digest to match."""
    envelope = json.loads(r.hget(KEYS.call(call_id), "envelope"))
    envelope["arguments"] = arguments
    r.hset(
        KEYS.call(call_id),
        mapping={
            "envelope": json.dumps(envelope),
            "digest": digest_call(envelope["name"], arguments),
        },
    )


def test_an_approval_without_the_shown_digest_signs_nothing_rewritten_after_the_view(
    pair, inproc: InProcess, r: redis.Redis
) -> None:
    from tests.apps import registry

    start_verifying(inproc, pair.verify)
    settings = make_settings(approval_signing_key=pair.signing)
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        sent = httpx.post(
            f"{api}/v1/runs/r-rewrite/calls",
            json=[{"id": "w1", "name": "wipe", "arguments": {"target": "staging"}}],
            headers={"Authorization": "Bearer agent-t"},
        ).json()
        call_id = sent["calls"][0]["call_id"]
        shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=ALICE).json()
        assert shown["arguments"] == {"target": "staging"}

        rewrite_arguments(r, call_id, {"target": "PRODUCTION"})
        record = r.hgetall(KEYS.call(call_id))
        audited = r.xlen(KEYS.audit_stream)

        approve = f"{api}/v1/approvals/{call_id}/approve"
        for body in (None, {}, {"note": "looks fine"}, {"arguments": {"target": "qa"}}):
            refused = httpx.post(approve, json=body, headers=ALICE)
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["code"] == "invalid_request"
            assert f"GET /v1/approvals/{call_id}" in error["message"]
            assert "digest" in error["message"]
        with ApprovalClient(api, "alice-t") as client, pytest.raises(PayloadError):
            client.approve(call_id)
        assert r.hgetall(KEYS.call(call_id)) == record  # nothing written
        # but audited: an approver's client that approves without showing the call
        refusals = [
            (f[b"call_id"], f[b"by"], f[b"outcome"])
            for _, f in r.xrange(KEYS.audit_stream)[audited:]
        ]
        assert len(refusals) >= 4
        assert set(refusals) == {(call_id.encode(), b"alice", b"refused:not_reviewed")}

        stale = httpx.post(approve, json={"digest": shown["digest"]}, headers=ALICE)
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "digest_mismatch"
        assert r.hget(KEYS.call(call_id), "status") == b"awaiting_approval"

        # Reviewed again, the rewrite is what the approver sees; denying needs no digest.
        again = httpx.get(f"{api}/v1/approvals/{call_id}", headers=ALICE).json()
        assert again["arguments"] == {"target": "PRODUCTION"}
        denied = httpx.post(f"{api}/v1/approvals/{call_id}/deny", headers=ALICE)
        assert denied.status_code == 200 and denied.json()["status"] == "denied"
        time.sleep(1.0)  # a queued call would have run on the in-process worker by now
        assert executions(r, call_id) == 0


def test_a_decision_token_asked_for_after_a_rewrite_approves_only_what_its_approver_saw(
    pair, inproc: InProcess, r: redis.Redis
) -> None:
    """Alice reviews the call, a Redis writer rewrites it, then alice asks for a decision
    token for the call she reviewed and hands it to her app's screen, which approves (as the
    guide's snippet does, ``screen.approve(call_id)``): the rewrite must not be signed
    (before, the token was bound to whatever was parked when it was issued, and the
    rewrite ran as alice's approval). The token is asked for with the digest she reviewed:
    a call changed since gets none, and one without a digest gets none."""
    from tests.apps import registry

    start_verifying(inproc, pair.verify)
    settings = make_settings(approval_signing_key=pair.signing)
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        sent = httpx.post(
            f"{api}/v1/runs/r-token/calls",
            json=[{"id": "w2", "name": "wipe", "arguments": {"target": "staging"}}],
            headers={"Authorization": "Bearer agent-t"},
        ).json()
        call_id = sent["calls"][0]["call_id"]
        with ApprovalClient(api, "alice-t") as alice:
            reviewed = alice.get(call_id)
            assert reviewed.arguments == {"target": "staging"}
            rewrite_arguments(r, call_id, {"target": "PRODUCTION"})
            with pytest.raises(DigestMismatchError):
                alice.decision_token(call_id, reviewed.digest)
        bare = httpx.post(
            f"{api}/v1/approvals/{call_id}/decision-token",
            headers={"Authorization": "Bearer alice-t"},
        )
        assert bare.status_code == 422 and "send back its digest" in bare.text
        assert executions(r, call_id) == 0
        assert r.hget(KEYS.call(call_id), "status") == b"awaiting_approval"
