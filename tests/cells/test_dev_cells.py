"""``toolq dev --shards 2``'s stack: two embedded Redis cells, a worker per risk in each."""

from __future__ import annotations

import httpx

from tests.apps import registry
from tests.cells.test_cells import TOKENS, h
from tests.conftest import ROOT, SECRETS_KEY
from toolq import Client, Settings
from toolq.cells import home_cell
from toolq.cli.stack import Stack, _free_port
from toolq.models import CallStatus
from toolq.workers.heartbeat import live_workers


def test_a_two_cell_stack_serves_runs_in_both_cells(monkeypatch) -> None:
    monkeypatch.setenv("TOOLQ_SECRETS_KEY", SECRETS_KEY)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import tests.apps
    monkeypatch.chdir(ROOT)
    stack = Stack.start("tests.apps:registry", "", pool="threads", concurrency=1, shards=2)
    try:
        stack.start_api(port=_free_port(), tokens={"admin-t": TOKENS["admin-t"]})
        # Six workers and the API start at once: on a loaded machine that takes longer than
        # the 30 s `toolq dev` waits by default.
        stack.wait_ready(timeout=60)
        # `toolq api` over TOOLQ_SHARDS, as `toolq dev --shards 2` runs it
        stack.wait_api(timeout=60)
        assert stack.api_url is not None
        health = httpx.get(f"{stack.api_url}/healthz").json()
        assert health["status"] == "ok" and [c["up"] for c in health["cells"]] == [True, True]
        urls = [cell.url for cell in stack.cells]
        assert len(urls) == 2 and len(stack.workers) == 6
        for index, url in enumerate(urls):
            names = {w["hostname"] for w in live_workers(Settings(redis_url=url))}
            assert len(names) == 3 and all(f"cell{index}-" in n for n in names), names
        settings = Settings(shards=urls, secrets_key=SECRETS_KEY)
        with Client(registry, settings) as client:
            batches = [
                client.dispatch([{"id": "a", "name": "echo", "arguments": {"text": "x"}}])
                for _ in range(20)
            ]
            assert {home_cell(b.run_id, 2) for b in batches} == {0, 1}
            assert all(b.wait(30)[0].status is CallStatus.SUCCEEDED for b in batches)
        listed = httpx.get(
            f"{stack.api_url}/v1/overview", params={"limit": 100}, headers=h("admin-t")
        ).json()
        assert {c["call_id"] for c in listed["calls"]} >= {b.call_ids[0] for b in batches}
    finally:
        stack.stop()
        if stack.api is not None:
            stack.api.wait(15)  # SIGTERMed by stop(); this test started it
    assert all(cell.process is not None and cell.process.poll() is not None for cell in stack.cells)
    assert all(proc.poll() is not None for proc in stack.workers.values())
