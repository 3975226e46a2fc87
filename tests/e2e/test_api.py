"""The HTTP API over real HTTP: uvicorn on a free port, real Redis, an in-process worker."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from anthropic.types import MessageParam, ToolParam
from pydantic import TypeAdapter

from tests.conftest import approve_shown, serve
from toolq.api.app import create_app
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

HTTP_TIMEOUT = 30
"""Seconds a request to the API may take: httpx's 5 s ran out on an approval beside a second
copy of the suite (the server logged the request's body cut short)."""
get = functools.partial(httpx.get, timeout=HTTP_TIMEOUT)
post = functools.partial(httpx.post, timeout=HTTP_TIMEOUT)

TOKENS = {
    "admin-t": ApiToken(principal="root", roles=["admin"]),
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(
        principal="alice", roles=["viewer", "approver:moderate", "approver:dangerous"]
    ),
    "bob-t": ApiToken(principal="bob", roles=["viewer", "approver:moderate"]),
    "view-t": ApiToken(principal="watcher", roles=["viewer"]),
    "self-t": ApiToken(principal="agent", roles=["approver:dangerous"]),
    "agent-mod-t": ApiToken(principal="agent", roles=["submitter", "approver:moderate"]),
}


@pytest.fixture
def api(settings) -> Iterator[str]:
    from tests.apps import registry

    yield from serve(create_app(settings, registry, tokens=TOKENS))


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def calls(*items: tuple[str, str, dict]) -> list[dict]:
    return [{"id": i, "name": n, "arguments": a} for i, n, a in items]


def test_health_tools_docs_and_auth(api, r):
    health = get(f"{api}/healthz")
    assert health.status_code == 200 and health.json()["status"] == "degraded"  # no worker
    assert {"name": "redis_writes", "ok": True} in health.json()["checks"]
    assert get(f"{api}/openapi.json").status_code == 200
    missing = get(f"{api}/v1/tools")
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthenticated"
    wrong = get(f"{api}/v1/tools", headers=h("nope"))
    assert wrong.status_code == 401
    for fmt in ("openai", "openai-responses", "anthropic", "gemini", "mcp"):
        got = get(f"{api}/v1/tools", params={"format": fmt}, headers=h("view-t"))
        assert got.status_code == 200 and got.json()
    anthropic = get(f"{api}/v1/tools", params={"format": "anthropic"}, headers=h("view-t")).json()
    for tool in anthropic:
        TypeAdapter(ToolParam).validate_python(tool)
    bad = get(f"{api}/v1/tools", params={"format": "cobol"}, headers=h("view-t"))
    assert bad.status_code == 422 or bad.status_code == 400
    assert "error" in bad.json()
    forbidden = post(
        f"{api}/v1/runs/r1/calls", json=calls(("a", "echo", {"text": "x"})), headers=h("view-t")
    )
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"


def test_dispatch_wait_messages_and_idempotency(api, inproc):
    inproc.start()
    body = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 2}},
            {"type": "tool_use", "id": "toolu_2", "name": "nope", "input": {}},
        ],
    }
    first = post(
        f"{api}/v1/runs/run-a/calls",
        json=body,
        headers={**h("agent-t"), "Idempotency-Key": "req-1"},
    )
    assert first.status_code == 202, first.text
    data = first.json()
    assert data["format"] == "anthropic"
    assert [c["status"] for c in data["calls"]] == ["queued", "failed"]
    again = post(
        f"{api}/v1/runs/run-a/calls",
        json=body,
        headers={**h("agent-t"), "Idempotency-Key": "req-1"},
    )
    assert [c["call_id"] for c in again.json()["calls"]] == [c["call_id"] for c in data["calls"]]
    call_id = data["calls"][0]["call_id"]
    deadline = time.monotonic() + 20
    while get(f"{api}/v1/calls/{call_id}", headers=h("view-t")).json()["status"] != "succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert get(f"{api}/v1/calls/{call_id}", headers=h("view-t")).json()["output"] == 4
    messages = get(f"{api}/v1/runs/run-a/messages", headers=h("view-t")).json()
    TypeAdapter(MessageParam).validate_python(messages[0])
    blocks = messages[0]["content"]
    assert [b["tool_use_id"] for b in blocks] == ["toolu_1", "toolu_2"]
    assert blocks[1]["is_error"] is True
    listed = get(f"{api}/v1/runs/run-a/calls", headers=h("view-t")).json()
    assert [c["call_id"] for c in listed] == [c["call_id"] for c in data["calls"]]
    unknown = get(f"{api}/v1/calls/does-not-exist", headers=h("view-t"))
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "call_not_found"


def read_sse(response: httpx.Response, count: int) -> list[tuple[str, str, dict]]:
    frames: list[tuple[str, str, dict]] = []
    event_id = event_type = ""
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("event: "):
            event_type = line[7:]
        elif line.startswith("data: "):
            frames.append((event_id, event_type, json.loads(line[6:])))
            if len(frames) == count:
                break
    return frames


def test_sse_stream_and_resume_with_last_event_id(api, inproc):
    inproc.start()
    post(
        f"{api}/v1/runs/run-s/calls", json=calls(("c", "countdown", {"n": 3})), headers=h("agent-t")
    )
    url = f"{api}/v1/runs/run-s/events"
    with httpx.stream("GET", url, headers=h("view-t"), timeout=20) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = read_sse(response, 7)  # queued, started, 4 progress, succeeded
    assert [f[1] for f in frames] == ["call.queued", "call.started"] + ["call.progress"] * 4 + [
        "call.succeeded"
    ]
    resume_from = frames[2][0]
    with httpx.stream(
        "GET", url, headers={**h("view-t"), "Last-Event-ID": resume_from}, timeout=20
    ) as response:
        resumed = read_sse(response, 4)
    assert [f[0] for f in resumed] == [f[0] for f in frames[3:]]
    backlog = get(url, params={"follow": "false", "after": frames[4][0]}, headers=h("view-t"))
    assert [e["id"] for e in backlog.json()] == [f[0] for f in frames[5:]]
    # a live follower receives events that happen after it connected
    received: list = []

    def follow() -> None:
        with httpx.stream(
            "GET", url, headers={**h("view-t"), "Last-Event-ID": frames[-1][0]}, timeout=20
        ) as response:
            received.extend(read_sse(response, 3))

    thread = threading.Thread(target=follow)
    thread.start()
    time.sleep(0.5)
    post(
        f"{api}/v1/runs/run-s/calls",
        json=calls(("d", "echo", {"text": "later"})),
        headers=h("agent-t"),
    )
    thread.join(20)
    assert [f[1] for f in received] == ["call.queued", "call.started", "call.succeeded"]


def test_approvals_roles_self_approval_edits_cancel_undo(api, inproc, tmp_path, r):
    inproc.start()
    posted = post(
        f"{api}/v1/runs/run-p/calls",
        headers=h("agent-t"),
        json=calls(
            ("w1", "wipe", {"target": "prod"}),
            ("w2", "wipe", {"target": "dev"}),
            ("w3", "wipe", {"target": "qa"}),
        ),
    ).json()
    w1, w2, w3 = (c["call_id"] for c in posted["calls"])
    pending = get(f"{api}/v1/approvals", params={"run_id": "run-p"}, headers=h("view-t")).json()
    assert {p["call_id"] for p in pending} == {w1, w2, w3}
    assert post(f"{api}/v1/approvals/{w1}/approve", headers=h("bob-t")).status_code == 403
    selfish = approve_shown(api, w1, h("self-t"), reader=h("view-t"))
    assert selfish.status_code == 403 and "self approval" in selfish.json()["error"]["message"]
    digest = get(f"{api}/v1/approvals/{w1}", headers=h("view-t")).json()["digest"]
    stale = post(
        f"{api}/v1/approvals/{w1}/approve", json={"digest": "f" * 64}, headers=h("alice-t")
    )
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "digest_mismatch"
    invalid = approve_shown(api, w1, h("alice-t"), arguments={"target": 5})
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_arguments"
    ok = post(
        f"{api}/v1/approvals/{w1}/approve",
        headers=h("alice-t"),
        json={"digest": digest, "arguments": {"target": "staging"}, "note": "safer"},
    )
    assert ok.status_code == 200, ok.text
    twice = approve_shown(api, w1, h("alice-t"))
    assert twice.status_code == 409 and twice.json()["error"]["code"] == "not_awaiting_approval"
    denied = post(f"{api}/v1/approvals/{w2}/deny", json={"reason": "frozen"}, headers=h("alice-t"))
    assert denied.json()["status"] == "denied"
    cancelled = post(f"{api}/v1/calls/{w3}/cancel", headers=h("agent-t"))
    assert cancelled.json()["status"] == "cancelled"
    deadline = time.monotonic() + 20
    while get(f"{api}/v1/calls/{w1}", headers=h("view-t")).json()["status"] != "succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert get(f"{api}/v1/calls/{w1}", headers=h("view-t")).json()["output"] == "wiped staging"
    messages = get(
        f"{api}/v1/runs/run-p/messages", params={"format": "openai"}, headers=h("view-t")
    ).json()
    assert "frozen" in messages[1]["content"]
    # undo through the API
    target = tmp_path / "f.txt"
    target.write_text("old")
    edit = post(
        f"{api}/v1/runs/run-u/calls",
        headers=h("agent-t"),
        json=calls(("e", "edit_file", {"path": str(target), "content": "new"})),
    ).json()
    edit_id = edit["calls"][0]["call_id"]
    assert approve_shown(api, edit_id, h("alice-t")).status_code == 200
    while get(f"{api}/v1/calls/{edit_id}", headers=h("view-t")).json()["status"] != "succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert target.read_text() == "new"
    # edit_file is gated (it asks for approval): its undo is an approver's decision, an
    # approver of its risk who is not its submitter (as for the call itself), on the undo
    # data they reviewed
    url = f"{api}/v1/calls/{edit_id}/undo"
    assert get(url, headers=h("agent-t")).status_code == 403
    shown = get(url, headers=h("bob-t")).json()
    assert shown["gated"] == "moderate" and shown["tool"] == "edit_file"
    assert shown["undo_data"] == {"path": str(target), "before": "old"}
    plain = post(url, headers=h("agent-t"), json={"undo_digest": shown["undo_digest"]})
    assert plain.status_code == 403 and plain.json()["error"]["code"] == "forbidden"
    own = post(url, headers=h("agent-mod-t"), json={"undo_digest": shown["undo_digest"]})
    assert own.status_code == 403 and own.json()["error"]["code"] == "not_authorized"
    unseen = post(url, headers=h("bob-t"), timeout=30)  # an approver must review the data
    assert unseen.status_code == 422 and "undo_digest" in unseen.json()["error"]["message"]
    # A Redis writer rewrites the undo data after bob reviewed it (another file to
    # overwrite): bob's undo is refused, nothing signed, nothing run
    kept = r.get(f"toolq:undo:{edit_id}")
    other = tmp_path / "other.txt"
    r.set(f"toolq:undo:{edit_id}", json.dumps({"path": str(other), "before": "pwned"}))
    swapped = post(url, headers=h("bob-t"), json={"undo_digest": shown["undo_digest"]})
    assert swapped.status_code == 409, swapped.text
    assert swapped.json()["error"]["code"] == "digest_mismatch"
    assert not other.exists() and target.read_text() == "new"
    assert get(url, headers=h("bob-t")).json()["undo_data"]["before"] == "pwned"
    r.set(f"toolq:undo:{edit_id}", kept)
    undone = post(url, headers=h("bob-t"), json={"undo_digest": shown["undo_digest"]})
    assert undone.status_code == 200 and undone.json()["type"] == "call.undone"
    assert target.read_text() == "old"
    again = post(url, headers=h("bob-t"), json={"undo_digest": shown["undo_digest"]})
    assert again.status_code == 409 and again.json()["error"]["code"] == "undo_failed"


def test_limits_refuse_with_4xx_and_write_nothing(api, r):
    before = r.dbsize()
    big = post(
        f"{api}/v1/runs/lim/calls",
        headers={**h("agent-t"), "Content-Type": "application/json"},
        content=b'{"x": "' + b"a" * (10 * 1024 * 1024) + b'"}',
        timeout=30,
    )
    assert big.status_code == 413 and big.json()["error"]["code"] == "payload_too_large"
    deep = "[" * 10_000 + "]" * 10_000
    nested = post(
        f"{api}/v1/runs/lim/calls",
        headers={**h("agent-t"), "Content-Type": "application/json"},
        content=deep.encode(),
    )
    assert nested.status_code == 400 and "nested deeper" in nested.json()["error"]["message"]
    many = calls(*[(f"c{i}", "echo", {"text": "x"}) for i in range(10_001)])
    flood = post(f"{api}/v1/runs/lim/calls", json=many, headers=h("agent-t"), timeout=30)
    assert flood.status_code == 400 and "limit is 10000" in flood.json()["error"]["message"]
    long = post(
        f"{api}/v1/runs/lim/calls",
        headers=h("agent-t"),
        json=calls(("l", "echo", {"text": "y" * (2 * 1024 * 1024)})),
        timeout=30,
    )
    assert long.status_code == 400 and "exceeds the limit" in long.json()["error"]["message"]
    garbage = post(
        f"{api}/v1/runs/lim/calls",
        headers={**h("agent-t"), "Content-Type": "application/json"},
        content=b"{not json",
    )
    assert garbage.status_code == 400
    empty = post(f"{api}/v1/runs/lim/calls", headers=h("agent-t"))
    assert empty.status_code == 400
    assert r.dbsize() == before  # nothing was written for any refused request


def scrape_commands(api: str, r) -> tuple[str, int]:
    """The metrics page and how many commands Redis served for it (``INFO commandstats``).

    Not counted: the snapshots' own ``INFO``, and the API's Redis gate's ``PING``, sent
    before a request only when its last answer is over a second old (on a loaded machine,
    before one scrape and not another).
    """

    def served() -> dict[str, int]:
        stats = r.info("commandstats")
        skip = ("cmdstat_info", "cmdstat_ping")
        return {k: v["calls"] for k, v in stats.items() if k not in skip}

    before = served()
    text = get(f"{api}/metrics", headers=h("view-t")).text
    return text, sum(served().values()) - sum(before.values())


def test_metrics(api, inproc, r):
    inproc.start()
    post(
        f"{api}/v1/runs/m/calls",
        json=calls(("a", "echo", {"text": "x"}), ("b", "wipe", {"target": "t"})),
        headers=h("agent-t"),
    )
    time.sleep(1.5)
    text = get(f"{api}/metrics", headers=h("view-t")).text
    assert 'toolq_workers_alive{risk="safe"} 1' in text
    assert "toolq_pending_approvals 1" in text
    echo = 'tool="echo",risk="safe"'
    assert f'toolq_call_events_total{{{echo},type="call.queued"}} 1' in text
    assert f'toolq_call_events_total{{{echo},type="call.started"}} 1' in text
    assert f'toolq_call_events_total{{{echo},type="call.succeeded"}} 1' in text
    wipe = 'tool="wipe",risk="dangerous"'
    assert f'toolq_call_events_total{{{wipe},type="call.awaiting_approval"}} 1' in text
    assert 'toolq_call_duration_ms_count{tool="echo"} 1' in text
    assert 'toolq_call_duration_ms_bucket{tool="echo",le="+Inf"} 1' in text
    assert 'toolq_queue_depth{risk="safe"} 0' in text
    # A scrape reads counters, not calls: 200 more finished calls cost it no more commands
    # (counted with the worker stopped, whose polls Redis would count too).
    inproc.stop_all()
    _, first = scrape_commands(api, r)
    inproc.start()
    many = [(f"e{n}", "echo", {"text": str(n)}) for n in range(200)]
    post(f"{api}/v1/runs/m2/calls", json=calls(*many), headers=h("agent-t"))
    deadline = time.monotonic() + 60
    while f'toolq_call_events_total{{{echo},type="call.succeeded"}} 201' not in text:
        assert time.monotonic() < deadline, "the 200 calls did not finish"
        time.sleep(0.5)
        text = get(f"{api}/metrics", headers=h("view-t")).text
    inproc.stop_all()
    _, then = scrape_commands(api, r)
    assert then == first, (first, then)
