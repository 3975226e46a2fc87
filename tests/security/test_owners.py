"""Runs have owners: each attack performed over real HTTP.

The API is served by uvicorn on a free port over the suite's Redis; calls run on an
in-process worker (``toolq.testing``), and the tools of ``tests.apps`` record every execution (and
``deploy``'s undo) in Redis lists, which are the ground truth of what ran.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from tests.conftest import approve_shown, serve
from toolq import Client
from toolq.api.app import create_app
from toolq.errors import NotRunOwnerError
from toolq.keys import Keys
from toolq.results.owners import REFUSALS_AUDITED
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

TOKENS = {
    "owner-t": ApiToken(principal="owner", roles=["submitter", "viewer"]),
    "owner-dangerous-t": ApiToken(principal="owner", roles=["submitter", "approver:dangerous"]),
    # The intruder holds every role but admin, so each refusal below is ownership's doing.
    "intruder-t": ApiToken(
        principal="mallory",
        roles=["submitter", "viewer", "approver:moderate", "approver:dangerous"],
    ),
    "alice-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"]),
    "admin-t": ApiToken(principal="root", roles=["admin"]),
    "acme-t": ApiToken(principal="ann", roles=["submitter", "viewer"], tenant="acme"),
    "globex-t": ApiToken(principal="gus", roles=["viewer"], tenant="globex"),
}


@pytest.fixture
def api(settings) -> Iterator[str]:
    from tests.apps import registry

    yield from serve(create_app(settings, registry, tokens=TOKENS))


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def calls(*items: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": i, "name": n, "arguments": a} for i, n, a in items]


def post(api: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(
        f"{api}{path}", headers={**h(token), **kwargs.pop("headers", {})}, timeout=30, **kwargs
    )


def call(api: str, call_id: str) -> dict[str, Any]:
    got = httpx.get(f"{api}/v1/calls/{call_id}", headers=h("alice-t"))
    assert got.status_code == 200, got.text
    data: dict[str, Any] = got.json()
    return data


def settle(api: str, call_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (data := call(api, call_id))["status"] not in (
        "succeeded",
        "failed",
        "denied",
        "cancelled",
        "expired",
        "timeout",
    ):
        assert time.monotonic() < deadline, f"call {call_id} still {data['status']}"
        time.sleep(0.1)
    return data


def runs(r: redis.Redis, call_id: str) -> list[str]:
    return [x.decode().split(":", 1)[1] for x in r.lrange(f"test:exec:{call_id}", 0, -1)]


def not_owner_refusals(settings) -> list[tuple[str, str, str]]:
    from tests.apps import registry

    with Client(registry, settings) as c:
        return [
            (e.by, e.run_id, e.call_id)
            for e in c.approvals.audit(count=1000)
            if e.outcome == "refused:not_owner"
        ]


def test_intruder_cannot_dispatch_into_or_cancel_anothers_run_nor_undo_its_calls(
    api, inproc, r, settings
):
    inproc.start()
    made = post(
        api,
        "/v1/runs/victim/calls",
        "owner-t",
        json=calls(
            ("d1", "deploy", {"service": "api", "replicas": 2}),
            ("d2", "deploy", {"service": "db", "replicas": 1}),
        ),
    )
    assert made.status_code == 202, made.text
    d1, d2 = (c["call_id"] for c in made.json()["calls"])
    assert call(api, d1)["status"] == "awaiting_approval"

    # Dispatch into the owner's run: refused, nothing written to the run.
    def records() -> set[bytes]:
        return set(r.keys("toolq:call:*")) | set(r.keys("toolq:idem:*"))

    keys_before = records()
    into = post(
        api,
        "/v1/runs/victim/calls",
        "intruder-t",
        json=calls(("x1", "deploy", {"service": "api", "replicas": 20})),
    )
    assert into.status_code == 403 and into.json()["error"]["code"] == "not_owner"
    listed = httpx.get(f"{api}/v1/runs/victim/calls", headers=h("alice-t")).json()
    assert [c["call_id"] for c in listed] == [d1, d2]
    assert records() == keys_before

    # Cancel the owner's parked call: refused, still parked.
    cancel = post(api, f"/v1/calls/{d2}/cancel", "intruder-t")
    assert cancel.status_code == 403 and cancel.json()["error"]["code"] == "not_owner"
    assert call(api, d2)["status"] == "awaiting_approval"

    # The owner's call is approved and runs as submitted.
    assert approve_shown(api, d1, h("alice-t")).status_code == 200
    assert settle(api, d1)["output"] == "deployed api x2"
    assert runs(r, d1) == ["deploy api 2"]

    # Undo the owner's finished dangerous call: not the owner's to decide but an approver's
    # (any approver of its risk in its tenant, as for the call itself; here the intruder is
    # one too: tests/approvals/test_undo_needs_a_person.py). Refused to the owner (no
    # approver role; with one, it is the call's submitter: no self-approval), the undo
    # handler never ran; an approver undoes it.
    shown = httpx.get(f"{api}/v1/calls/{d1}/undo", headers=h("alice-t")).json()
    reviewed = {"undo_digest": shown["undo_digest"]}
    plain = post(api, f"/v1/calls/{d1}/undo", "owner-t", json=reviewed)
    assert plain.status_code == 403 and plain.json()["error"]["code"] == "forbidden"
    own = post(api, f"/v1/calls/{d1}/undo", "owner-dangerous-t", json=reviewed)
    assert own.status_code == 403 and own.json()["error"]["code"] == "not_authorized"
    time.sleep(1.0)
    assert r.lrange("test:undo:deploy", 0, -1) == []
    undone = post(api, f"/v1/calls/{d1}/undo", "alice-t", json=reviewed)
    assert undone.status_code == 200 and undone.json()["type"] == "call.undone", undone.text
    assert r.lrange("test:undo:deploy", 0, -1) == [d1.encode()]

    # An admin may act on any run.
    admin = post(api, f"/v1/calls/{d2}/cancel", "admin-t")
    assert admin.status_code == 200 and admin.json()["status"] == "cancelled"
    assert runs(r, d2) == []

    refused = not_owner_refusals(settings)
    assert ("mallory", "victim", "") in refused  # the dispatch
    assert ("mallory", "victim", d2) in refused  # the cancel
    assert len(refused) == 2


def test_preclaimed_provider_call_id_does_not_capture_the_owners_call(api, inproc, r):
    inproc.start()
    first = post(
        api, "/v1/runs/victim/calls", "owner-t", json=calls(("c0", "echo", {"text": "owner first"}))
    )
    assert first.status_code == 202
    # The intruder tries to claim the id the owner's model will use next.
    grab = post(
        api,
        "/v1/runs/victim/calls",
        "intruder-t",
        json=calls(("c1", "echo", {"text": "intruder output"})),
    )
    assert grab.status_code == 403
    # Even a principal allowed into the run (an admin) claims that id only for itself.
    admin = post(
        api,
        "/v1/runs/victim/calls",
        "admin-t",
        json=calls(("c1", "echo", {"text": "admin output"})),
    )
    assert admin.status_code == 202 and admin.json()["calls"][0]["duplicate"] is False
    mine = post(
        api,
        "/v1/runs/victim/calls",
        "owner-t",
        json=calls(("c1", "deploy", {"service": "web", "replicas": 3})),
    )
    assert mine.status_code == 202
    ref = mine.json()["calls"][0]
    assert ref["duplicate"] is False and ref["status"] == "awaiting_approval"
    assert ref["call_id"] != admin.json()["calls"][0]["call_id"]
    # A retry of the owner's own dispatch still returns the same call.
    again = post(
        api,
        "/v1/runs/victim/calls",
        "owner-t",
        json=calls(("c1", "deploy", {"service": "web", "replicas": 3})),
    )
    assert again.json()["calls"][0] == {**ref, "duplicate": True}
    assert approve_shown(api, ref["call_id"], h("alice-t")).status_code == 200
    assert settle(api, ref["call_id"])["output"] == "deployed web x3"
    assert runs(r, ref["call_id"]) == ["deploy web 3"]


def test_separator_collisions_create_both_calls(api, r):
    # Before: run "victimrun:call:x" + id "y" and run "victimrun" + id "x:call:y" shared a key.
    attacker = post(
        api,
        "/v1/runs/victimrun:call:x/calls",
        "intruder-t",
        json=calls(("y", "echo", {"text": "attacker output"})),
    )
    assert attacker.status_code == 202
    victim = post(
        api,
        "/v1/runs/victimrun/calls",
        "owner-t",
        json=calls(("x:call:y", "deploy", {"service": "api", "replicas": 1})),
    )
    ref = victim.json()["calls"][0]
    assert ref["duplicate"] is False and ref["status"] == "awaiting_approval"
    assert ref["call_id"] != attacker.json()["calls"][0]["call_id"]
    assert call(api, ref["call_id"])["name"] == "deploy"

    # The same with Idempotency-Key (stored as "client:<key>:<position>").
    attacker = post(
        api,
        "/v1/runs/vr:client:k/calls",
        "intruder-t",
        headers={"Idempotency-Key": "z"},
        json=calls(("a", "echo", {"text": "attacker output"})),
    )
    victim = post(
        api,
        "/v1/runs/vr/calls",
        "owner-t",
        headers={"Idempotency-Key": "k:client:z"},
        json=calls(("b", "deploy", {"service": "api", "replicas": 1})),
    )
    ref = victim.json()["calls"][0]
    assert ref["duplicate"] is False and ref["status"] == "awaiting_approval"
    assert ref["call_id"] != attacker.json()["calls"][0]["call_id"]


def test_idempotency_keys_cannot_collide_for_one_owner(client, r):
    # Same (anonymous) owner, ids made to line up under the old "run:kind:id" layout.
    a = client.dispatch(calls(("y", "echo", {"text": "a"})), run_id="victimrun:call:x")
    b = client.dispatch(calls(("x:call:y", "echo", {"text": "b"})), run_id="victimrun")
    assert not a.calls[0].duplicate and not b.calls[0].duplicate
    assert a.call_ids != b.call_ids
    keys = Keys()
    assert keys.idempotency(None, "r", "a:b") != keys.idempotency(None, "r:a", "b")
    assert keys.idempotency("p", "r", "k") != keys.idempotency("q", "r", "k")
    assert keys.idempotency(None, "r", "k") != keys.idempotency("null", "r", "k")


def test_always_approve_applies_only_to_the_owners_calls(api, inproc, r):
    inproc.start()
    first = post(
        api,
        "/v1/runs/sticky/calls",
        "owner-t",
        json=calls(("d1", "deploy", {"service": "api", "replicas": 2})),
    )
    d1 = first.json()["calls"][0]["call_id"]
    assert approve_shown(api, d1, h("alice-t"), always=True).status_code == 200
    settle(api, d1)
    # The intruder cannot ride the rule: its dispatch is refused outright.
    ride = post(
        api,
        "/v1/runs/sticky/calls",
        "intruder-t",
        json=calls(("d2", "deploy", {"service": "api", "replicas": 20})),
    )
    assert ride.status_code == 403
    # A principal allowed into the run (an admin) does not get the owner's rule either.
    admin = post(
        api,
        "/v1/runs/sticky/calls",
        "admin-t",
        json=calls(("d3", "deploy", {"service": "api", "replicas": 20})),
    )
    a3 = admin.json()["calls"][0]
    assert a3["status"] == "awaiting_approval"
    # The owner's next deploy is approved by the rule and runs.
    again = post(
        api,
        "/v1/runs/sticky/calls",
        "owner-t",
        json=calls(("d4", "deploy", {"service": "api", "replicas": 3})),
    )
    d4 = again.json()["calls"][0]
    assert d4["status"] == "queued"
    assert settle(api, d4["call_id"])["output"] == "deployed api x3"
    time.sleep(0.5)
    assert call(api, a3["call_id"])["status"] == "awaiting_approval"
    assert runs(r, a3["call_id"]) == []
    executed = [x for k in r.keys("test:exec:*") for x in runs(r, k.decode().split(":", 2)[2])]
    assert sorted(executed) == ["deploy api 2", "deploy api 3"]


def test_rules_change_by_a_non_owner_is_refused(api, client, settings):
    made = post(
        api,
        "/v1/runs/ruled/calls",
        "owner-t",
        json=calls(("d1", "deploy", {"service": "api", "replicas": 2})),
    )
    assert made.status_code == 202
    with pytest.raises(NotRunOwnerError):
        client.approvals.set_rules("ruled", mode="auto", principal="mallory")
    with pytest.raises(NotRunOwnerError):
        client.approvals.restore_state("ruled", {"always_approve": ["deploy"]}, principal=None)
    assert client.approvals.rules("ruled").mode is None
    assert client.approvals.rules("ruled").always_approve == []
    # Rules left on a run before it exists make their setter its owner.
    client.approvals.set_rules("future", mode="auto", principal="mallory", by="alice")
    late = post(
        api,
        "/v1/runs/future/calls",
        "owner-t",
        json=calls(("d1", "deploy", {"service": "api", "replicas": 2})),
    )
    assert late.status_code == 403 and late.json()["error"]["code"] == "not_owner"
    assert client.store.run_call_ids("future") == []
    # Owner and admin may.
    assert client.approvals.set_rules("ruled", mode="strict", principal="owner").mode == "strict"
    assert client.approvals.set_rules("ruled", approve_tools=["echo"], admin=True).approve_tools
    refused = not_owner_refusals(settings)
    assert ("mallory", "ruled", "") in refused and ("", "ruled", "") in refused
    assert ("owner", "future", "") in refused


def test_library_runs_without_principals_keep_working(client, inproc):
    inproc.start()
    batch = client.dispatch(calls(("e1", "echo", {"text": "hi"})), run_id="lib")
    assert batch.wait(30)[0].output == {"text": "hi"}
    more = client.dispatch(calls(("e2", "slow", {"seconds": 5})), run_id="lib")
    assert client.cancel(more.call_ids[0]).status.value in ("cancelled", "running")
    with pytest.raises(NotRunOwnerError):
        client.dispatch(calls(("e3", "echo", {"text": "x"})), run_id="lib", principal="someone")
    with pytest.raises(NotRunOwnerError):
        client.cancel(more.call_ids[0], principal="someone")


def test_raising_predicate_fails_only_its_call(api, inproc, r):
    inproc.start()
    # The approvals guide's predicate `lambda a: a["amount"] > 100` meets the string "5000".
    made = post(
        api,
        "/v1/runs/pay/calls",
        "owner-t",
        json=calls(
            ("t1", "transfer", {"amount": "5000"}),
            ("t2", "transfer", {"amount": 5}),
            ("e1", "echo", {"text": "still here"}),
        ),
    )
    assert made.status_code == 202, made.text
    t1, t2, e1 = (c["call_id"] for c in made.json()["calls"])
    bad = settle(api, t1)
    assert bad["status"] == "failed" and bad["error_type"] == "approval_predicate_error"
    assert "approval predicate of 'transfer'" in bad["error"] and "TypeError" in bad["error"]
    assert runs(r, t1) == []
    assert settle(api, t2)["output"] == "moved 5"
    assert settle(api, e1)["output"] == {"text": "still here"}


def test_predicate_answer_that_is_not_bool_able_fails_only_its_call(settings, r):
    from toolq import ToolRegistry

    class Ambiguous:
        def __bool__(self) -> bool:
            raise ValueError("truth value is ambiguous")

    local = ToolRegistry()

    @local.tool(requires_approval=lambda args: Ambiguous())
    def odd(x: int) -> int:
        """A tool whose predicate answers something that is not a bool."""
        return x

    @local.tool()
    def fine(x: int) -> int:
        """A plain tool."""
        return x

    with Client(local, settings) as c:
        batch = c.dispatch(calls(("o", "odd", {"x": 1}), ("f", "fine", {"x": 2})))
        odd_ref, fine_ref = batch.calls
        assert odd_ref.status.value == "failed" and fine_ref.status.value == "queued"
        result = c.result(odd_ref.call_id)
        assert result.error_type == "approval_predicate_error"
        assert "ValueError: truth value is ambiguous" in (result.error or "")


def metric(api: str, name: str) -> float:
    page = httpx.get(f"{api}/metrics", headers=h("admin-t"), timeout=30)
    assert page.status_code == 200, page.text
    (value,) = [line.split()[-1] for line in page.text.splitlines() if line.startswith(name)]
    return float(value)


def test_refused_reads_are_counted_and_audited_once_per_target_and_minute(api, r, settings):
    made = post(
        api,
        "/v1/runs/acme-run/calls",
        "acme-t",
        json=calls(*((f"e{i}", "echo", {"text": str(i)}) for i in range(25))),
    )
    assert made.status_code == 202, made.text
    first, *others = [c["call_id"] for c in made.json()["calls"]]

    # 2,000 reads of another tenant's run and call, refused one by one
    with httpx.Client(base_url=api, headers=h("globex-t"), timeout=30) as viewer:
        for i in range(1000):
            for path in ("/v1/runs/acme-run/calls", f"/v1/calls/{first}"):
                got = viewer.get(path)
                assert got.status_code == 403, (i, got.text)
        # then once each of 24 other calls: more targets than one principal's audit budget
        for call_id in others:
            assert viewer.get(f"/v1/calls/{call_id}").status_code == 403

    refused = [e for e in not_owner_refusals(settings) if e[0] == "gus"]
    assert ("gus", "acme-run", "") in refused and ("gus", "acme-run", first) in refused
    assert len(refused) == REFUSALS_AUDITED  # 2 targets + 18 of the 24 others, then none
    assert metric(api, "toolq_refused_requests_total") == 2024
    assert metric(api, "toolq_refusals_audited_total") == REFUSALS_AUDITED
