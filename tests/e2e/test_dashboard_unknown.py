"""The dashboard's "Unknown outcome" panel in a real browser: a real worker killed -9
mid-call of a tool that is not idempotent, the call shown for a person, resolved there."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import serve
from tests.e2e.test_dashboard import SLOW, TOKENS, browse, expect, h, sign_in
from toolq import CallStatus, Client
from toolq.api.app import create_app

pytestmark = pytest.mark.e2e


@pytest.fixture
def api(settings) -> Iterator[str]:
    from tests.apps import registry

    yield from serve(create_app(settings, registry, tokens=TOKENS))


def test_an_unknown_call_is_shown_and_resolved_from_the_dashboard(api, settings, workers, r):
    from tests.apps import registry

    victim = workers.start("safe", concurrency=1, TOOLQ_REDELIVER_AFTER="2")
    posted = httpx.post(
        f"{api}/v1/runs/dash-unknown/calls",
        json=[
            {"id": "u1", "name": "slow", "arguments": {"seconds": 3}},
            {"id": "u2", "name": "slow", "arguments": {"seconds": 3}},
        ],
        headers=h("agent-t"),
    )
    first, second = (c["call_id"] for c in posted.json()["calls"])
    deadline = time.monotonic() + 20
    while r.llen(f"test:exec:{first}") == 0:
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.05)
    workers.kill9(victim)
    workers.start("safe", concurrency=1, TOOLQ_REDELIVER_AFTER="2")
    with Client(registry, settings) as client:
        deadline = time.monotonic() + 30
        while client.store.statuses([first]) != [CallStatus.UNKNOWN]:
            assert time.monotonic() < deadline, "the lost call never became unknown"
            time.sleep(0.1)
        for page in browse(api):
            sign_in(page)
            row = page.locator(f'[data-testid="unknown-row"][data-call-id="{first}"]')
            expect(row).to_be_visible(timeout=SLOW)
            expect(page.locator("#unknown-count")).to_have_text("1")
            expect(row).to_contain_text('"seconds": 3')
            row.get_by_label("Resolution note").fill("charge found <b>at the bank</b>")
            row.get_by_label("Result text").fill("charged")
            row.locator('button[data-outcome="succeeded"]').click()
            expect(page.locator("#toast")).to_contain_text("→ succeeded", timeout=SLOW)
            expect(page.locator("#unknown-panel")).to_be_hidden(timeout=SLOW)
            result = client.result(first)
            assert result.status is CallStatus.SUCCEEDED and result.output == "charged"
            assert r.llen(f"test:exec:{first}") == 1
            # the sibling that never started ran on the new worker, once
            assert client.wait([second], timeout=30)[0].status is CallStatus.SUCCEEDED
            audit = [
                {k.decode(): v.decode() for k, v in fields.items()}
                for _, fields in r.xrange("toolq:audit")
            ]
            assert [(a["by"], a["outcome"]) for a in audit if a["call_id"] == first] == [
                ("root", "resolved:succeeded")
            ]
