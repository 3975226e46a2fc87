"""``GET /v1/approvals`` and ``GET /v1/runs/{run_id}/calls`` a page at a time, over HTTP."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import pytest

from tests.api.conftest import h

pytestmark = pytest.mark.e2e

TIMEOUT = 30.0
"""Seconds a request may take: a page of 100 approvals once took over httpx's default 5 s
with the suite running twice beside other jobs on two cores."""


def get(url: str, **kwargs) -> httpx.Response:
    """``httpx.get`` with ``TIMEOUT``."""
    return httpx.get(url, timeout=TIMEOUT, **kwargs)


def park(client, count: int, *, run_id: str = "run-p", tool: str = "wipe", tenant="default"):
    """``count`` parked calls of ``tool`` in one dispatch by ``agent``; their call ids.

    Calls parked together share their parking time: they are listed in call id order.
    """
    payload = [
        {"id": f"{run_id}-{tool}-{time.monotonic_ns()}-{i}", "name": tool, "arguments": _args(tool)}
        for i in range(count)
    ]
    batch = client.dispatch(payload, run_id=run_id, principal="agent", tenant=tenant)
    assert {c.status.value for c in batch.calls} == {"awaiting_approval"}
    return sorted(batch.call_ids)


def _args(tool: str) -> dict:
    return {"wipe": {"target": "/tmp/x"}, "purge": {}, "edit_file": {"path": "p", "content": "c"}}[
        tool
    ]


def walk(api: str, token: str = "view-t", **params) -> tuple[list[str], list[httpx.Response]]:
    """Every page of ``/v1/approvals`` by ``X-Next-Cursor``: the ids seen and the responses."""
    seen: list[str] = []
    responses = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        got = get(f"{api}/v1/approvals", params=query, headers=h(token))
        assert got.status_code == 200, got.text
        responses.append(got)
        seen.extend(item["call_id"] for item in got.json())
        cursor = got.headers.get("X-Next-Cursor")
        if cursor is None:
            return seen, responses


def test_the_default_page_is_bounded_and_its_headers_lead_on(api, client):
    parked = park(client, 130)
    first = get(f"{api}/v1/approvals", headers=h("view-t"))
    assert first.status_code == 200
    body = first.json()
    assert isinstance(body, list) and len(body) == 100
    assert first.headers["X-Total-Count"] == "130"
    cursor = first.headers["X-Next-Cursor"]
    assert first.headers["Link"] == f'</v1/approvals?cursor={cursor}>; rel="next"'
    # oldest parked first
    assert [item["call_id"] for item in body] == parked[:100]
    second = get(f"{api}/v1/approvals", params={"cursor": cursor}, headers=h("view-t"))
    assert [item["call_id"] for item in second.json()] == parked[100:]
    assert "X-Next-Cursor" not in second.headers and "Link" not in second.headers
    assert second.headers["X-Total-Count"] == "130"
    big = get(f"{api}/v1/approvals", params={"limit": 1000}, headers=h("view-t"))
    assert len(big.json()) == 130 and "X-Next-Cursor" not in big.headers


def test_a_cursor_walk_sees_every_call_once_while_calls_come_and_go(api, client):
    parked = park(client, 90)
    seen: list[str] = []
    decided: set[str] = set()
    added: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = {"limit": 17, **({"cursor": cursor} if cursor else {})}
        got = get(f"{api}/v1/approvals", params=query, headers=h("view-t"))
        assert got.status_code == 200, got.text
        seen.extend(item["call_id"] for item in got.json())
        pages += 1
        # Between pages: new calls are parked, one seen call and one not yet seen are decided
        # (the cursor's own call included, so the next page starts past a call that left).
        added.extend(park(client, 3, run_id=f"run-new-{pages}"))
        if seen:
            client.approvals.deny(seen[-1], "alice")
            decided.add(seen[-1])
        ahead = [c for c in parked if c not in seen and c not in decided]
        if ahead:
            client.approvals.approve(ahead[-1], "alice")
            decided.add(ahead[-1])
        cursor = got.headers.get("X-Next-Cursor")
        if cursor is None:
            break
    assert len(seen) == len(set(seen)), "a call was listed twice"
    assert {c for c in parked if c not in decided} <= set(seen), "a parked call was missed"
    # calls parked after the walk started come after the cursor: listed before it ends
    assert set(added[:-3]) <= set(seen)


def test_filters_by_time_tool_risk_run_and_tenant(api, client):
    early = park(client, 3, run_id="run-a")
    time.sleep(0.05)
    middle = time.time()
    time.sleep(0.05)
    late = park(client, 2, run_id="run-b", tool="purge")
    moderate = park(client, 2, run_id="run-b", tool="edit_file")
    acme = park(client, 2, run_id="run-acme", tenant="acme")

    def ids(token: str = "view-t", **params) -> tuple[list[str], httpx.Response]:
        got = get(f"{api}/v1/approvals", params=params, headers=h(token))
        assert got.status_code == 200, got.text
        return [item["call_id"] for item in got.json()], got

    listed, got = ids(until=repr(middle))
    assert listed == early and got.headers["X-Total-Count"] == "3"
    iso = datetime.fromtimestamp(middle, UTC).isoformat().replace("+00:00", "Z")
    listed, got = ids(since=iso)
    assert listed == late + moderate + acme and got.headers["X-Total-Count"] == "6"
    listed, got = ids(since=str(middle), limit=2)
    assert listed == late and got.headers["X-Total-Count"] == "6"
    listed, got = ids(tool="purge")
    assert listed == late and "X-Total-Count" not in got.headers  # counting needs a scan
    listed, _ = ids(risk="moderate")
    assert listed == moderate
    listed, got = ids(run_id="run-b", limit=3)
    assert listed == (late + moderate)[:3] and got.headers["X-Total-Count"] == "4"
    rest, _ = ids(run_id="run-b", cursor=got.headers["X-Next-Cursor"])
    assert rest == moderate[1:]
    listed, got = ids(tenant="acme")
    assert listed == acme and got.headers["X-Total-Count"] == "2"
    # a tenant-bound caller sees its tenant's calls only, counted as such
    listed, got = ids("acme-view-t")
    assert listed == acme and got.headers["X-Total-Count"] == "2"
    refused = get(f"{api}/v1/approvals", params={"tenant": "default"}, headers=h("acme-view-t"))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "wrong_tenant"


@pytest.mark.parametrize(
    ("params", "status", "words"),
    [
        ({"limit": 0}, 422, "limit"),
        ({"limit": 1001}, 422, "limit"),
        ({"limit": "ten"}, 422, "limit"),
        ({"cursor": "not-a-cursor"}, 400, "invalid cursor"),
        ({"cursor": "WyJuYW4iLCJ4Il0"}, 400, "invalid cursor"),  # ["nan","x"]
        ({"since": "yesterday"}, 400, "since must be ISO-8601"),
        ({"until": "inf"}, 400, "until must be a finite time"),
        ({"since": "2026-11-25T10:00:00Z", "until": "2026-11-24"}, 400, "is after until"),
        ({"cursor": "x" * 2000}, 422, "cursor"),
    ],
)
def test_hostile_paging_input_is_a_clear_4xx(api, client, params, status, words):
    got = get(f"{api}/v1/approvals", params=params, headers=h("view-t"))
    assert got.status_code == status, got.text
    assert words in got.text


def test_a_runs_calls_come_a_page_at_a_time(api, client):
    batch = client.dispatch(
        [{"id": f"t{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(7)],
        run_id="run-c",
        principal="agent",
    )
    url = f"{api}/v1/runs/run-c/calls"
    first = get(url, params={"limit": 3}, headers=h("view-t"))
    assert [c["call_id"] for c in first.json()] == batch.call_ids[:3]
    assert first.headers["X-Total-Count"] == "7"
    more = client.dispatch(
        [{"id": "t-late", "name": "echo", "arguments": {"text": "late"}}],
        run_id="run-c",
        principal="agent",
    )
    seen = [c["call_id"] for c in first.json()]
    cursor = first.headers["X-Next-Cursor"]
    while cursor:
        got = get(url, params={"limit": 3, "cursor": cursor}, headers=h("view-t"))
        seen.extend(c["call_id"] for c in got.json())
        cursor = got.headers.get("X-Next-Cursor")
    assert seen == batch.call_ids + more.call_ids
    default = get(url, headers=h("view-t"))
    assert len(default.json()) == 8 and "X-Next-Cursor" not in default.headers
    bad = get(url, params={"cursor": "bm9wZQ"}, headers=h("view-t"))
    assert bad.status_code == 400


def test_calls_parked_before_the_indexes_are_listed_and_stale_entries_dropped(api, client, r):
    parked = park(client, 4, run_id="run-old")
    keys = client.keys
    r.delete(keys.parked, keys.tenant_parked("default"))  # as parked by an older version
    [decided] = park(client, 1, run_id="run-old")
    client.approvals.deny(decided, "alice")
    r.zadd(keys.parked, {decided: 1.0})  # left behind by an older decider
    got = get(f"{api}/v1/approvals", headers=h("view-t"))
    assert [item["call_id"] for item in got.json()] == parked
    assert r.zscore(keys.parked, decided) is None
    again = get(f"{api}/v1/approvals", headers=h("view-t"))
    assert again.headers["X-Total-Count"] == "4"


def test_the_approval_client_follows_the_pages(api, client):
    from toolq import ApprovalClient

    parked = park(client, 1001)
    with ApprovalClient(api, "view-t") as approver:
        listed = [request.call_id for request in approver.pending()]
    assert listed == parked


def test_the_async_approval_client_follows_the_pages_and_decides(api, client):
    import asyncio

    from toolq import AsyncApprovalClient, CallStatus

    parked = park(client, 1001)

    async def listed_then_denied() -> tuple[list[str], CallStatus]:
        async with AsyncApprovalClient(api, "alice-t") as approver:
            listed = [request.call_id for request in await approver.pending(risk="dangerous")]
            shown = await approver.get(parked[0])
            denied = await approver.deny(shown.call_id, "not today")
            return listed, denied.status

    assert asyncio.run(listed_then_denied()) == (parked, CallStatus.DENIED)
