"""Decision tokens over the real HTTP API: an approver's one decision on one call, carried by
another process, recorded as that approver; forged, reused, stale or expired ones refused."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.approvals.conftest import Pair, audit_outcomes, executions, start_verifying
from tests.conftest import make_settings, serve
from toolq import ApprovalClient, CallStatus
from toolq.api.app import create_app
from toolq.api.auth import Principal
from toolq.api.decision_tokens import DecisionTokens
from toolq.dispatch.approval_client import DecisionToken
from toolq.errors import (
    ConfigurationError,
    DigestMismatchError,
    NotAuthorizedError,
    NotAwaitingApprovalError,
    NotRunOwnerError,
)
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

DANGEROUS = ["viewer", "approver:dangerous"]
TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(principal="alice", roles=DANGEROUS),
    "bob-t": ApiToken(principal="bob", roles=DANGEROUS),
    "safe-t": ApiToken(principal="sam", roles=["viewer", "approver:safe"]),
    "self-t": ApiToken(principal="agent", roles=DANGEROUS),  # the submitter, as an approver
    "acme-t": ApiToken(principal="acme-ops", roles=DANGEROUS, tenant="acme"),
}


class Api:
    def __init__(self, url: str) -> None:
        self.url = url

    def dispatch(self, run_id: str, *calls: tuple[str, str, dict]) -> list[str]:
        body = [{"id": i, "name": n, "arguments": a} for i, n, a in calls]
        sent = httpx.post(
            f"{self.url}/v1/runs/{run_id}/calls",
            json=body,
            headers={"Authorization": "Bearer agent-t"},
        )
        assert sent.status_code == 202, sent.text
        return [c["call_id"] for c in sent.json()["calls"]]

    def person(self, token: str) -> ApprovalClient:
        return ApprovalClient(self.url, token)

    def post(self, path: str, token: str, body: dict | None = None) -> httpx.Response:
        return httpx.post(
            f"{self.url}{path}", json=body or {}, headers={"Authorization": f"Bearer {token}"}
        )


@pytest.fixture
def api(pair: Pair, inproc, r) -> Iterator[Api]:
    from tests.apps import registry

    start_verifying(inproc, pair.verify, dangerous_approvals=2)
    settings = make_settings(approval_signing_key=pair.signing, dangerous_approvals=2)
    for url in serve(create_app(settings, registry, tokens=TOKENS)):
        yield Api(url)


def token_for(api: Api, person: str, call_id: str) -> DecisionToken:
    """``person``'s decision token for the call as they were shown it (its digest)."""
    with api.person(person) as approver:
        return approver.decision_token(call_id, approver.get(call_id).digest)


def wait_final(api: Api, call_id: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        call = httpx.get(
            f"{api.url}/v1/calls/{call_id}", headers={"Authorization": "Bearer agent-t"}
        ).json()
        if call["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
            return call
        time.sleep(0.1)


def test_tokens_decide_as_their_approvers_and_count_once_each(api, r):
    [call_id] = api.dispatch("dt-run", ("w", "wipe", {"target": "prod"}))
    alice = token_for(api, "alice-t", call_id)
    assert alice.approver == "alice" and alice.token.startswith("tqd_")
    with api.person(alice.token) as screen:  # another process, holding only the token
        shown = screen.get(call_id)
        assert shown.arguments == {"target": "prod"} and shown.digest == alice.digest
        partial = screen.approve(call_id)
        assert partial.status is CallStatus.AWAITING_APPROVAL  # one of two
        with pytest.raises(NotAuthorizedError, match="used already"):
            screen.approve(call_id)
    # a second token for the same person counts as that person: once
    again = token_for(api, "alice-t", call_id)
    with pytest.raises(NotAuthorizedError, match="already approved"):
        api.person(again.token).approve(call_id)
    bob = token_for(api, "bob-t", call_id)
    assert api.person(bob.token).approve(call_id).status is CallStatus.QUEUED
    assert wait_final(api, call_id)["output"] == "wiped prod"  # signed by the API: it ran
    request = api.person("alice-t").get(call_id)
    assert request.approvals == ["alice", "bob"] and request.decided_by == "bob"
    assert executions(r, call_id) == 1


def test_only_an_approver_of_the_calls_risk_and_tenant_gets_one(api):
    [call_id] = api.dispatch("dt-who", ("w", "wipe", {"target": "prod"}))
    for token, code in [
        ("agent-t", "forbidden"),
        ("safe-t", "forbidden"),
        ("self-t", "not_authorized"),
        ("acme-t", "not_owner"),
    ]:
        refused = api.post(f"/v1/approvals/{call_id}/decision-token", token)
        assert refused.status_code == 403, (token, refused.text)
        assert refused.json()["error"]["code"] == code, (token, refused.text)
    with pytest.raises(NotRunOwnerError):
        token_for(api, "acme-t", call_id)


def test_a_token_decides_only_its_own_call_and_never_always(api):
    first, second = api.dispatch(
        "dt-bound", ("a", "wipe", {"target": "a"}), ("b", "wipe", {"target": "b"})
    )
    token = token_for(api, "alice-t", first).token
    other = api.post(f"/v1/decisions/{second}/approve", token)
    assert other.status_code == 401 and "not for call" in other.json()["error"]["message"]
    for verb, body in [("approve", {"always": True}), ("deny", {"reason": "no", "always": True})]:
        sticky = api.post(f"/v1/decisions/{first}/{verb}", token, body)
        assert sticky.status_code == 403, verb
        assert f"cannot {verb} the tool" in sticky.json()["error"]["message"]
    api_token = api.post(f"/v1/decisions/{first}/approve", "alice-t")  # not a decision token
    assert api_token.status_code == 401
    listing = httpx.get(f"{api.url}/v1/approvals", headers={"Authorization": f"Bearer {token}"})
    assert listing.status_code == 401  # it opens nothing else
    assert api.person(token).deny(first, "no").status is CallStatus.DENIED  # still unused


def test_forged_and_tampered_tokens_are_refused(api, pair):
    [call_id] = api.dispatch("dt-forge", ("w", "wipe", {"target": "prod"}))
    token = token_for(api, "alice-t", call_id).token
    body, _, mac = token.removeprefix("tqd_").partition(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["by"] = "bob"
    forged_body = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    other_key = DecisionTokens(make_settings(approval_signing_key=Pair().signing))
    for forged in [
        f"tqd_{forged_body}.{mac}",  # another approver under alice's MAC
        other_key.issue(call_id, payload["digest"], Principal("bob", frozenset())),
        "tqd_bm90IGEgdG9rZW4.AAAA",
    ]:
        refused = api.post(f"/v1/decisions/{call_id}/approve", forged)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthenticated"
    assert api.person("alice-t").get(call_id).approvals == []


def test_one_of_many_concurrent_uses_decides(api):
    [call_id] = api.dispatch("dt-race", ("w", "wipe", {"target": "prod"}))
    token = token_for(api, "alice-t", call_id).token
    codes: list[int] = []
    barrier = threading.Barrier(8)

    def use() -> None:
        barrier.wait()
        codes.append(api.post(f"/v1/decisions/{call_id}/approve", token).status_code)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [200] + [401] * 7
    assert api.person("alice-t").get(call_id).approvals == ["alice"]


def test_a_token_approves_no_edit(api, r):
    """The token's holder is not its approver: an edit it chose would run as approved by a
    person who never saw it (before, the holder's arguments ran, recorded as alice's). The
    refusal spends nothing: the same token then approves the call as alice was shown it."""
    [call_id] = api.dispatch("dt-edit", ("w", "wipe", {"target": "prod"}))
    token = token_for(api, "alice-t", call_id).token
    for edit in ({"target": "staging"}, {"target": 7}):
        with pytest.raises(NotAuthorizedError, match="cannot approve an edit"):
            api.person(token).approve(call_id, arguments=edit)
    shown = api.person("bob-t").get(call_id)
    assert shown.arguments == {"target": "prod"} and shown.approvals == []
    refused = [(by, outcome) for c, by, outcome in audit_outcomes(r) if c == call_id]
    assert refused == [("alice", "refused:token_edit")] * 2  # audited, as alice's token
    done = api.person(token).approve(call_id)
    assert done.status is CallStatus.AWAITING_APPROVAL  # (a quorum of two here)
    shown = api.person("bob-t").get(call_id)
    assert shown.approvals == ["alice"] and shown.arguments == {"target": "prod"}


def test_a_use_that_decided_nothing_gives_the_token_back(api):
    [call_id] = api.dispatch("dt-refund", ("w", "wipe", {"target": "prod"}))
    token = token_for(api, "alice-t", call_id).token
    api.person("bob-t").deny(call_id, "not now")  # decided meanwhile: the use decides nothing
    with pytest.raises(NotAwaitingApprovalError):
        api.person(token).approve(call_id)
    with pytest.raises(NotAwaitingApprovalError):  # given back: refused for the call, not spent
        api.person(token).deny(call_id, "no")


def test_a_token_is_bound_to_the_arguments_it_was_issued_for(api):
    [call_id] = api.dispatch("dt-stale", ("w", "wipe", {"target": "prod"}))
    token = token_for(api, "alice-t", call_id).token
    bob = api.person("bob-t")
    bob.approve(call_id, arguments={"target": "PRODUCTION"}, digest=bob.get(call_id).digest)
    with pytest.raises(DigestMismatchError):
        api.person(token).approve(call_id)
    with pytest.raises(DigestMismatchError):
        api.person(token).deny(call_id, "no")
    assert api.person("alice-t").get(call_id).approvals == ["bob"]


def test_an_expired_token_is_refused(pair, inproc, r):
    from tests.apps import registry

    start_verifying(inproc, pair.verify)
    settings = make_settings(approval_signing_key=pair.signing, decision_token_seconds=0.3)
    for url in serve(create_app(settings, registry, tokens=TOKENS)):
        api = Api(url)
        [call_id] = api.dispatch("dt-old", ("w", "wipe", {"target": "prod"}))
        token = token_for(api, "alice-t", call_id).token
        time.sleep(0.5)
        with pytest.raises(NotAuthorizedError, match="expired"):
            api.person(token).approve(call_id)


def test_no_tokens_without_the_signing_key(inproc, r):
    from tests.apps import registry

    for url in serve(create_app(make_settings(), registry, tokens=TOKENS)):
        api = Api(url)
        [call_id] = api.dispatch("dt-nokey", ("w", "wipe", {"target": "prod"}))
        with pytest.raises(ConfigurationError, match="TOOLQ_APPROVAL_SIGNING_KEY"):
            token_for(api, "alice-t", call_id)
