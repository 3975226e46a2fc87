"""Once a call left Redis, the API, the CLI and the clients read it from the history store."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from tests.api.conftest import TOKENS, h
from tests.apps import registry
from tests.conftest import ROOT, make_settings, serve
from toolq import AsyncClient, CallStatus, Client
from toolq.api.app import create_app
from toolq.errors import NotRetryableError
from toolq.history.archiver import Archiver
from toolq.history.store import HistoryStore
from toolq.keys import Keys
from toolq.testing import TestWorker


def toolq(*args: str, settings) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "TOOLQ_HISTORY_URL": settings.history_url,
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, "-m", "toolq", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


@pytest.fixture
def cold(r, history_url):
    """Calls of two tenants run, denied and failed, archived, then gone from Redis."""
    settings = make_settings(history_url=history_url, hot_seconds=1)
    keys = Keys(settings.key_prefix)
    with Client(registry, settings) as client:
        ran = client.dispatch(
            [
                {"id": "e1", "name": "echo", "arguments": {"text": "hi"}},
                {"id": "x1", "name": "no_such_tool", "arguments": {}},
            ],
            run_id="run-default",
            principal="agent",
        )
        acme = client.dispatch(
            [{"id": "a1", "name": "add", "arguments": {"a": 2, "b": 3}}],
            run_id="run-acme",
            principal="acme-bot",
            tenant="acme",
        )
        parked = client.dispatch(
            [{"id": "w1", "name": "wipe", "arguments": {"target": "/tmp/x"}}],
            run_id="run-default",
            principal="agent",
        )
        with TestWorker(settings, registry) as worker:
            worker.drain()
        client.approvals.deny(parked.call_ids[0], "alice", "not today")
        ran.wait(timeout=10)
        acme.wait(timeout=10)
        hot = {
            "events": [e.model_dump() for e in client.events("run-default")],
            "results": {
                c: client.result(c).model_dump()
                for c in [*ran.call_ids, *acme.call_ids, *parked.call_ids]
            },
        }
    history = HistoryStore(settings.history_url)
    assert Archiver(r, keys, settings, history, "t").step(100) == 4
    history.close()
    time.sleep(1.3)
    assert not r.exists(keys.call(ran.call_ids[0]), keys.run_stream("run-default"))
    assert not r.exists(keys.run_owner("run-acme"), keys.call(parked.call_ids[0]))
    return (
        settings,
        hot,
        {
            "echo": ran.call_ids[0],
            "failed": ran.call_ids[1],
            "add": acme.call_ids[0],
            "wipe": parked.call_ids[0],
        },
    )


def test_clients_read_archived_calls_as_they_read_hot_ones(cold):
    settings, hot, ids = cold
    with Client(registry, settings) as client:
        for call_id, result in hot["results"].items():
            assert client.result(call_id).model_dump() == result
        assert [e.model_dump() for e in client.events("run-default")] == hot["events"]
        waited = client.wait([ids["echo"], ids["wipe"]], timeout=2)
        assert [x.status for x in waited] == [CallStatus.SUCCEEDED, CallStatus.DENIED]
        assert [x.call_id for x in client.results("run-default")] == [
            ids["echo"],
            ids["failed"],
            ids["wipe"],
        ]
        assert client.approvals.get(ids["wipe"]).status == "denied"
        with pytest.raises(NotRetryableError, match="archived"):
            client.retry(ids["wipe"], principal="agent")
        assert not client.redis.exists(Keys().call(ids["wipe"]))  # nothing half-written

    async def read() -> None:
        async with AsyncClient(registry, settings) as aclient:
            assert (await aclient.result(ids["add"])).output == 5
            assert (await aclient.wait([ids["add"]], timeout=2))[0].output == 5
            seen = [e.model_dump() async for e in aclient.events("run-default")]
            assert seen == hot["events"]

    import asyncio

    asyncio.run(read())


def test_the_api_serves_archived_calls_events_and_history_search_per_tenant(cold):
    settings, hot, ids = cold
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        run = httpx.get(f"{api}/v1/runs/run-default", headers=h("view-t"))
        assert run.status_code == 200, run.text
        assert run.json()["statuses"] == {"denied": 1, "failed": 1, "succeeded": 1}
        assert run.json()["owner"] == "agent"
        listed = httpx.get(f"{api}/v1/runs", headers=h("acme-view-t")).json()
        assert [(x["run_id"], x["calls"]) for x in listed] == [("run-acme", 1)]
        assert httpx.get(f"{api}/v1/runs/run-default", headers=h("acme-view-t")).status_code == 403
        got = httpx.get(f"{api}/v1/calls/{ids['echo']}", headers=h("view-t"))
        assert got.status_code == 200 and got.json()["output"] == {"text": "hi"}
        events = httpx.get(
            f"{api}/v1/runs/run-default/events", params={"follow": "false"}, headers=h("view-t")
        )
        assert [e["id"] for e in events.json()] == [e["id"] for e in hot["events"]]
        # SSE from the history store: the backlog, resumed after an id.
        after = hot["events"][1]["id"]
        with httpx.stream(
            "GET",
            f"{api}/v1/runs/run-default/events",
            headers={**h("view-t"), "Last-Event-ID": after},
            timeout=10,
        ) as stream:
            ids_seen: list[str] = []
            for line in stream.iter_lines():
                if line.startswith("id: "):
                    ids_seen.append(line[4:])
                if len(ids_seen) == len(hot["events"]) - 2:
                    break
        assert ids_seen == [e["id"] for e in hot["events"][2:]]
        # A tenant-bound token: its tenant's archived calls only.
        foreign = httpx.get(f"{api}/v1/calls/{ids['echo']}", headers=h("acme-view-t"))
        assert foreign.status_code == 403, (foreign.status_code, foreign.text)
        foreign_run = httpx.get(
            f"{api}/v1/runs/run-default/events",
            params={"follow": "false"},
            headers=h("acme-view-t"),
        )
        assert foreign_run.status_code == 403
        own = httpx.get(f"{api}/v1/history/calls", headers=h("acme-view-t"))
        assert own.status_code == 200, own.text
        assert [c["call_id"] for c in own.json()] == [ids["add"]]
        other = httpx.get(
            f"{api}/v1/history/calls", params={"tenant": "default"}, headers=h("acme-view-t")
        )
        assert other.status_code == 403 and other.json()["error"]["code"] == "wrong_tenant"
        # Filters and pages.
        everything = httpx.get(f"{api}/v1/history/calls", headers=h("view-t")).json()
        assert {c["call_id"] for c in everything} == set(ids.values())
        denied = httpx.get(
            f"{api}/v1/history/calls", params={"approver": "alice"}, headers=h("view-t")
        ).json()
        assert [(c["call_id"], c["status"]) for c in denied] == [(ids["wipe"], "denied")]
        failed = httpx.get(
            f"{api}/v1/history/calls", params={"error": "NO_SUCH"}, headers=h("view-t")
        ).json()
        assert [c["call_id"] for c in failed] == [ids["failed"]]
        by_tool = httpx.get(
            f"{api}/v1/history/calls",
            params={
                "tool": "echo",
                "status": "succeeded",
                "run": "run-default",
                "submitter": "agent",
                "since": "0",
            },
            headers=h("view-t"),
        ).json()
        assert [c["call_id"] for c in by_tool] == [ids["echo"]]
        none = httpx.get(
            f"{api}/v1/history/calls", params={"until": "1"}, headers=h("view-t")
        ).json()
        assert none == []
        pages, cursor = [], None
        while True:
            params = {"limit": 1, **({"cursor": cursor} if cursor else {})}
            page = httpx.get(f"{api}/v1/history/calls", params=params, headers=h("view-t"))
            pages += [c["call_id"] for c in page.json()]
            cursor = page.headers.get("X-Next-Cursor")
            if cursor is None:
                break
        assert pages == [c["call_id"] for c in everything]
        bad = httpx.get(f"{api}/v1/history/calls", params={"cursor": "x!"}, headers=h("view-t"))
        assert bad.status_code == 400
        # Exports.
        text = httpx.get(
            f"{api}/v1/history/calls", params={"format": "csv"}, headers=h("view-t")
        ).text
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [r["call_id"] for r in rows] == pages
        lines = httpx.get(
            f"{api}/v1/history/calls", params={"format": "jsonl"}, headers=h("view-t")
        ).text.splitlines()
        assert [json.loads(line)["call_id"] for line in lines] == pages


def test_the_cli_shows_tails_and_searches_archived_calls(cold):
    settings, hot, ids = cold
    shown = toolq("calls", "show", ids["wipe"], "--json", settings=settings)
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["call"]["status"] == "denied" and view["request"]["decided_by"] == "alice"
    assert [e["type"] for e in view["events"]] == ["call.awaiting_approval", "call.denied"]
    tailed = toolq("tail", "run-default", "--json", settings=settings)
    assert tailed.returncode == 0, tailed.stderr
    assert [json.loads(line)["id"] for line in tailed.stdout.splitlines()] == [
        e["id"] for e in hot["events"]
    ]
    found = toolq("history", "search", "--tenant", "acme", "--json", settings=settings)
    assert found.returncode == 0, found.stderr
    assert [json.loads(line)["call_id"] for line in found.stdout.splitlines()] == [ids["add"]]
    exported = toolq("history", "search", "--status", "failed", "--csv", settings=settings)
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert [(r["call_id"], r["error_type"]) for r in rows] == [(ids["failed"], "tool_not_found")]
