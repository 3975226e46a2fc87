"""Attacks on the reviewed undo (``GET``/``POST /v1/calls/{id}/undo``).

Each test performs an attack (a reviewer's, on the first version of the route, where each
failed): what an approver is shown is what the handler gets, and only those who may undo a
call see its undo data.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from pydantic import SecretStr

from tests.api.conftest import TOKENS, h
from tests.conftest import serve
from toolq.api.app import create_app
from toolq.models import RiskLevel
from toolq.settings import ApiToken
from toolq.signing import generate_pair

pytestmark = pytest.mark.e2e


def _succeeded(client, name: str, arguments: dict, run_id: str) -> str:
    """A gated call by ``agent``, approved (unsigned; the in-process worker verifies nothing)
    and run: its call id, with the undo data its worker stored."""
    batch = client.dispatch(
        [{"id": f"{run_id}-1", "name": name, "arguments": arguments}],
        run_id=run_id,
        principal="agent",
    )
    call_id = batch.call_ids[0]
    client.approvals.approve(call_id, by="alice")
    assert batch.wait(timeout=30)[0].status.value == "succeeded"
    return call_id


def test_deeply_nested_undo_data_is_a_4xx_not_a_500(api, client, inproc, r):
    """A Redis writer stores undo data nested 5,000 deep: the approver is shown it as the
    stored text (it was a 500: RecursionError in json.loads)."""
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-deep")
    r.set(f"toolq:undo:{call_id}", "[" * 5000 + "]" * 5000)
    got = httpx.get(f"{api}/v1/calls/{call_id}/undo", headers=h("alice-t"))
    assert got.status_code == 200, got.text
    assert got.json()["undo_data"] is None
    assert got.json()["undo_text"] == "[" * 5000 + "]" * 5000


def test_the_submitter_cannot_read_the_undo_data_it_may_not_undo(api, client, inproc, r):
    """GET is asked by whoever may undo the call (as POST): the call's submitter holding an
    approver role may not undo it (403 not_authorized, self approval), nor read its undo
    data (it was answered 200)."""
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-self")
    url = f"{api}/v1/calls/{call_id}/undo"
    shown = httpx.get(url, headers=h("alice-t")).json()
    own = httpx.post(url, headers=h("self-t"), json={"undo_digest": shown["undo_digest"]})
    assert own.status_code == 403 and own.json()["error"]["code"] == "not_authorized"
    peek = httpx.get(url, headers=h("self-t"))
    assert peek.status_code == 403, peek.text


@pytest.fixture
def strict_api(settings) -> Iterator[str]:
    """The API with TOOLQ_APPROVERS naming alice only: bob's approver:moderate role alone
    does not let him decide."""
    from tests.apps import registry

    strict = settings.model_copy(
        update={"approvers": {"alice": [RiskLevel.MODERATE, RiskLevel.DANGEROUS]}}
    )
    tokens = {**TOKENS, "bob-t": ApiToken(principal="bob", roles=["viewer", "approver:moderate"])}
    yield from serve(create_app(strict, registry, tokens=tokens))


def test_an_approver_refused_by_toolq_approvers_cannot_read_the_undo_data(
    strict_api, client, inproc, r, tmp_path
):
    """bob is not in TOOLQ_APPROVERS: his undo is refused (403), and so is his GET of the
    undo data (a file's previous content here; it was answered 200)."""
    inproc.start()
    target = tmp_path / "secret.txt"
    target.write_text("the old, private content\n")
    call_id = _succeeded(client, "edit_file", {"path": str(target), "content": "new"}, "r-allow")
    url = f"{strict_api}/v1/calls/{call_id}/undo"
    shown = httpx.get(url, headers=h("alice-t")).json()
    refused = httpx.post(url, headers=h("bob-t"), json={"undo_digest": shown["undo_digest"]})
    assert refused.status_code == 403, refused.text
    peek = httpx.get(url, headers=h("bob-t"))
    assert peek.status_code == 403, peek.text


def test_undo_data_the_approver_is_shown_is_what_the_handler_gets(api, client, inproc, r, tmp_path):
    """A Redis writer stores undo data with a NaN: the approver is shown it as stored (the
    text with its ``NaN``), not as ``"before": null`` (for edit_file's undo: remove the
    file) while the handler got ``nan`` and wrote "nan" into the file."""
    inproc.start()
    target = tmp_path / "f.txt"
    target.write_text("old")
    call_id = _succeeded(client, "edit_file", {"path": str(target), "content": "new"}, "r-nan")
    stored = '{"path": ' + json.dumps(str(target)) + ', "before": NaN}'
    r.set(f"toolq:undo:{call_id}", stored)
    url = f"{api}/v1/calls/{call_id}/undo"
    shown = httpx.get(url, headers=h("bob-t"))
    assert shown.status_code == 200, shown.text
    assert shown.json()["undo_data"] is None
    assert shown.json()["undo_text"] == stored
    # well-formed undo data is shown indented, as the handler gets it
    r.set(f"toolq:undo:{call_id}", json.dumps({"path": str(target), "before": 2**70}))
    again = httpx.get(url, headers=h("bob-t")).json()
    assert str(2**70) in again["undo_text"] and again["undo_data"]["before"] == 2**70


QUORUM_TOKENS = {
    **TOKENS,
    "dan-t": ApiToken(principal="dan", roles=["viewer", "approver:dangerous"]),
}


@pytest.fixture
def quorum_api(settings) -> Iterator[str]:
    """The API with two approvers for DANGEROUS calls (no signing key: votes unverified)."""
    from tests.apps import registry

    two = settings.model_copy(update={"dangerous_approvals": 2})
    yield from serve(create_app(two, registry, tokens=QUORUM_TOKENS))


@pytest.fixture
def signing_quorum_api(settings) -> Iterator[str]:
    """The same API holding a signing key (the production shape: votes verified)."""
    from tests.apps import registry

    signing, _ = generate_pair()
    two = settings.model_copy(
        update={"dangerous_approvals": 2, "approval_signing_key": SecretStr(signing)}
    )
    yield from serve(create_app(two, registry, tokens=QUORUM_TOKENS))


def _reviewed(url: str, token: str = "alice-t") -> dict[str, str]:
    shown = httpx.get(url, headers=h(token))
    assert shown.status_code == 200, shown.text
    return {"undo_digest": shown.json()["undo_digest"]}


def test_a_dangerous_undo_is_requested_once_its_quorum_asked(quorum_api, client, inproc, r):
    """With two approvers per DANGEROUS call, the first approver's undo answers 202 with
    the approvers so far (nothing requested, the handler not run); the second's runs it."""
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-quorum")
    url = f"{quorum_api}/v1/calls/{call_id}/undo"
    shown = httpx.get(url, headers=h("alice-t")).json()
    reviewed = {"undo_digest": shown["undo_digest"]}
    first = httpx.post(url, headers=h("alice-t"), json=reviewed)
    assert first.status_code == 202, first.text
    body = first.json()
    assert body["status"] == "awaiting_approvals" and body["code"] == "undo_awaiting_approvals"
    assert body["approvers"] == ["alice"] and body["required"] == 2
    assert r.hget(f"toolq:call:{call_id}", "undo_state") is None
    assert r.lrange("test:undo:deploy", 0, -1) == []
    second = httpx.post(url, headers=h("dan-t"), json=reviewed, timeout=30)
    assert second.status_code == 200 and second.json()["type"] == "call.undone", second.text
    assert r.lrange("test:undo:deploy", 0, -1) == [call_id.encode()]


@pytest.mark.parametrize("which", ["quorum_api", "signing_quorum_api"])
def test_deeply_nested_undo_votes_are_not_a_500(which, request, client, inproc, r):
    """A Redis writer sets the record's ``undo_votes`` to a list nested 100,000 deep: the
    corrupt votes do not count (every approver's POST was a 500: RecursionError, and the
    DANGEROUS call could no longer be undone through the API)."""
    api = request.getfixturevalue(which)
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-deepvotes")
    url = f"{api}/v1/calls/{call_id}/undo"
    reviewed = _reviewed(url)
    r.hset(f"toolq:call:{call_id}", "undo_votes", "[" * 100_000 + "]" * 100_000)
    got = httpx.post(url, headers=h("alice-t"), json=reviewed, timeout=30)
    assert got.status_code != 500, got.text
    assert got.status_code == 202, got.text  # the corrupt votes simply do not count


def test_a_deeply_nested_vote_string_is_not_a_500(signing_quorum_api, client, inproc, r):
    """A Redis writer puts one string into ``undo_votes`` that is a JSON list nested 100,000
    deep: no signature, not counted (``Verifier.payload``'s json.loads raised RecursionError:
    a 500 on every approver's POST)."""
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-deepvote")
    url = f"{signing_quorum_api}/v1/calls/{call_id}/undo"
    reviewed = _reviewed(url)
    r.hset(f"toolq:call:{call_id}", "undo_votes", json.dumps(["[" * 100_000 + "]" * 100_000]))
    got = httpx.post(url, headers=h("alice-t"), json=reviewed, timeout=30)
    assert got.status_code == 202, got.text


@pytest.mark.parametrize("vote", ['{"payload": [1]}', '{"payload": "by"}', '{"payload": 7}'])
def test_a_vote_whose_payload_is_not_an_object_is_not_a_500(vote, quorum_api, client, inproc, r):
    """Without a signing key ``held_approvals`` takes each vote at its word: one whose
    payload is a list, string or number does not count (it was an AttributeError, a 500 on
    every approver's POST)."""
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-shape")
    url = f"{quorum_api}/v1/calls/{call_id}/undo"
    reviewed = _reviewed(url)
    r.hset(f"toolq:call:{call_id}", "undo_votes", json.dumps([vote]))
    got = httpx.post(url, headers=h("alice-t"), json=reviewed, timeout=30)
    assert got.status_code == 202, got.text


def test_a_vote_on_an_undo_in_progress_is_refused_not_kept(quorum_api, client, inproc, r):
    """alice and dan asked: the undo is requested (no worker has taken it yet). alice asks
    again: 409 (an undo is already in progress), nothing written (her vote was written and
    answered 202, to count toward a later undo of the call)."""
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-again")
    inproc.stop_all()  # the undo stays requested
    url = f"{quorum_api}/v1/calls/{call_id}/undo"
    reviewed = _reviewed(url)
    assert httpx.post(url, headers=h("alice-t"), json=reviewed).status_code == 202
    asked = httpx.post(f"{url}?timeout=0.5", headers=h("dan-t"), json=reviewed, timeout=30)
    assert asked.status_code == 504, asked.text  # requested, not finished in 0.5 s
    assert r.hget(f"toolq:call:{call_id}", "undo_state") == b"requested"
    again = httpx.post(url, headers=h("alice-t"), json=reviewed, timeout=30)
    assert again.status_code == 409, again.text
    assert r.hget(f"toolq:call:{call_id}", "undo_votes") is None


def test_two_approvers_at_once_both_count(quorum_api, client, inproc, r):
    """alice and dan ask at the same moment: one 202, the other runs the undo (both count)."""
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-race")
    url = f"{quorum_api}/v1/calls/{call_id}/undo"
    reviewed = _reviewed(url)
    answers: dict[str, int] = {}
    barrier = threading.Barrier(2)

    def ask(token: str) -> None:
        barrier.wait()
        answers[token] = httpx.post(url, headers=h(token), json=reviewed, timeout=30).status_code

    threads = [threading.Thread(target=ask, args=(t,)) for t in ("alice-t", "dan-t")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers.values()) == [200, 202], answers
    assert r.lrange("test:undo:deploy", 0, -1) == [call_id.encode()]


AGE = 3.0  # TOOLQ_UNDO_APPROVAL_SECONDS in these tests


@pytest.fixture
def short_quorum_api(settings) -> Iterator[str]:
    """Two approvers for DANGEROUS calls, a signing key, undo approvals good for AGE s."""
    from tests.apps import registry

    signing, _ = generate_pair()
    two = settings.model_copy(
        update={
            "dangerous_approvals": 2,
            "approval_signing_key": SecretStr(signing),
            "undo_approval_seconds": AGE,
        }
    )
    yield from serve(create_app(two, registry, tokens=QUORUM_TOKENS))


def test_asking_again_renews_an_approvers_undo_approval(short_quorum_api, client, inproc, r):
    """alice asks (202), and asks again later to renew it (202). dan asks while alice's
    second approval is still good: the quorum is there (the vote kept her first approval,
    so it ran out AGE s after her first ask whatever she did)."""
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-renew")
    url = f"{short_quorum_api}/v1/calls/{call_id}/undo"
    reviewed = _reviewed(url)
    first = httpx.post(url, headers=h("alice-t"), json=reviewed)
    assert first.status_code == 202, first.text
    time.sleep(AGE * 0.6)
    again = httpx.post(url, headers=h("alice-t"), json=reviewed)
    assert again.status_code == 202, again.text
    time.sleep(AGE * 0.6)  # alice's first approval is AGE*1.2 s old, her second AGE*0.6 s
    last = httpx.post(url, headers=h("dan-t"), json=reviewed, timeout=30)
    assert last.status_code == 200, last.text  # (it was 202, approvers == ["dan"])
    assert last.json()["type"] == "call.undone"


@pytest.mark.parametrize("which", ["quorum_api", "signing_quorum_api"])
def test_junk_votes_do_not_crowd_out_the_askers_own_approval(which, request, client, inproc, r):
    """A Redis writer puts 32 junk strings into ``undo_votes``. alice asks: she is counted
    (her approval went after them, past the 32 looked at: "approved by : 0 of 2")."""
    api = request.getfixturevalue(which)
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-crowd")
    url = f"{api}/v1/calls/{call_id}/undo"
    reviewed = _reviewed(url)
    r.hset(f"toolq:call:{call_id}", "undo_votes", json.dumps(["junk"] * 32))
    got = httpx.post(url, headers=h("alice-t"), json=reviewed, timeout=30)
    assert got.status_code == 202, got.text
    body = got.json()
    assert body["approvers"] == ["alice"], body
