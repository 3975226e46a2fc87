"""The dashboard at 1400 px and at a phone's width, under volume, when the API stops; runs.

Chromium as ``test_dashboard`` drives it (uvicorn, real Redis, a real ``toolq worker``).
Screenshots of both widths go to the test's tmp dir (and to ``TOOLQ_DASHBOARD_SCREENSHOTS``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import serve
from tests.e2e import test_dashboard as base
from tests.e2e.test_dashboard import SLOW, TOKENS, browse, dispatch, expect, h, screenshot, sign_in
from toolq.api.app import create_app
from toolq.quotas import Budget, TenantConfig

pytestmark = pytest.mark.e2e

PARKED = 300
TENANTS = {
    "acme-production-eu-west": TenantConfig(
        weight=3, concurrency=12, rate_limit="100/s", budget=Budget(limit=5000)
    ),
}
MEASURE = """() => {
  const scroller = document.querySelector('#tenants-panel .scroll-x');
  const workers = document.querySelector('#workers-panel .scroll-x');
  const host = document.querySelector('[data-testid=worker-host]');
  const current = document.querySelector('[data-testid=worker-current]');
  const links = [...document.querySelectorAll('a[data-testid=call-link]')]
    .filter(a => a.offsetParent);
  const range = node => { const r = document.createRange(); r.selectNodeContents(node);
    return r.getBoundingClientRect(); };
  const oneLine = a => a.getClientRects().length === 1
    && a.getBoundingClientRect().height < 1.8 * parseFloat(getComputedStyle(a).fontSize);
  return {page: document.documentElement.scrollWidth, viewport: window.innerWidth,
    tenants: scroller.scrollWidth, tenantsBox: scroller.clientWidth,
    host: host.getBoundingClientRect().width,
    workers: workers.scrollWidth, workersBox: workers.clientWidth,
    current: range(current).height, line: parseFloat(getComputedStyle(current).lineHeight),
    links: links.length, broken: links.filter(a => !oneLine(a)).map(a => a.textContent),
    rows: document.querySelectorAll('[data-testid=approval-row]').length,
    height: document.documentElement.scrollHeight,
    approvals: document.getElementById('approvals-panel').getBoundingClientRect().height};
}"""


@pytest.fixture
def api(settings) -> Iterator[str]:
    from tests.apps import registry

    configured = settings.model_copy(update={"tenants": TENANTS})
    yield from serve(create_app(configured, registry, tokens=TOKENS))


page = base.page


def shoot(page: Any, folder: Path, name: str) -> None:
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(folder / name), full_page=True)
    screenshot(page, name)


def test_volume_layout_at_1400_px_and_on_a_phone(api, workers, page, tmp_path):
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    icon = httpx.get(f"{api}/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    workers.start(pool="threads", concurrency=6)
    busy = dispatch(api, "run-busy", *[(f"s{i}", "slow", {"seconds": 60}) for i in range(6)])
    wipes = [(f"w{i}", "wipe", {"target": f"db-{i}-" + "x" * 150}) for i in range(PARKED)]
    parked = dispatch(api, "run-parked", *wipes)
    page.set_viewport_size({"width": 1400, "height": 900})
    sign_in(page)

    # one page of approvals, whatever is parked: 50 rows, a count, a next page
    rows = page.get_by_test_id("approval-row")
    info = page.get_by_test_id("approvals-info")
    expect(info).to_have_text(f"showing 50 of {PARKED}", timeout=SLOW)
    expect(rows).to_have_count(50)
    page.click("#approvals-next")
    expect(info).to_have_text(f"showing 51\N{EN DASH}100 of {PARKED}")
    expect(rows).to_have_count(50)
    page.click("#approvals-prev")
    expect(info).to_have_text(f"showing 50 of {PARKED}")
    # the time-range filter: none was created over an hour ago, all of them in the last 15 min
    page.select_option("#approvals-age", "-3600")
    expect(rows).to_have_count(0)
    expect(page.locator("#approvals-empty")).to_be_visible()
    page.select_option("#approvals-age", "900")
    expect(rows).to_have_count(50)

    # dispatch order: the newest dispatch's calls newest first, as dispatched
    shown = page.get_by_test_id("call-row")
    expect(shown).to_have_count(50)
    order = [shown.nth(i).get_attribute("data-call-id") for i in range(50)]
    assert order == list(reversed(parked))[:50]

    # the busy worker: six current calls in one line, three links and a count
    current = page.get_by_test_id("worker-current")
    expect(current).to_contain_text("+3 more", timeout=SLOW)
    expect(page.get_by_test_id("queue-unit-safe")).to_have_text("queued messages")
    expect(page.locator("#tenants thead")).to_contain_text("Queued calls")

    got = page.evaluate(MEASURE)
    assert got["page"] <= got["viewport"], got  # nothing wider than the window
    assert got["tenants"] <= got["tenantsBox"], got  # the Tenants table is not clipped
    assert got["host"] >= 100, got  # HOST keeps room for a host name
    assert got["workers"] <= got["workersBox"], got  # nor is the Workers table
    assert got["current"] < 4.5 * got["line"], got  # CURRENT CALLS: three ids and "+3 more"
    assert got["links"] >= 50 and got["broken"] == [], got  # no id broken across lines
    assert got["rows"] == 50 and got["height"] < 6000, got  # bounded by the page, not by 300
    shoot(page, tmp_path, "dashboard-1400.png")

    page.set_viewport_size({"width": 390, "height": 844})
    expect(rows).to_have_count(50)
    got = page.evaluate(MEASURE)
    assert got["page"] <= got["viewport"], got
    assert got["broken"] == [], got
    assert got["rows"] == 50 and got["approvals"] < 50 * 60, got  # two short lines a row
    shoot(page, tmp_path, "dashboard-phone.png")
    assert (tmp_path / "dashboard-1400.png").stat().st_size > 0
    assert failed == [], failed  # no 404, not even /favicon.ico
    for call_id in busy:
        httpx.post(f"{api}/v1/calls/{call_id}/cancel", headers=h("admin-t"))


@pytest.fixture
def stoppable(settings) -> Iterator[tuple[str, Iterator[str]]]:
    from tests.apps import registry

    server = serve(create_app(settings, registry, tokens=TOKENS))
    yield next(server), server
    next(server, None)


def test_panels_are_marked_stale_when_the_api_stops(stoppable):
    api, server = stoppable
    [parked] = dispatch(api, "run-stale", ("w", "wipe", {"target": "x"}))
    pages = browse(api)
    page = next(pages)
    try:
        sign_in(page)
        expect(page.get_by_test_id("approval-row")).to_have_count(1)
        expect(page.locator("#conn")).to_contain_text("live")
        expect(page.locator("[data-stale]")).to_have_count(0)
        next(server, None)  # the API stops
        stale = page.locator("#stale")
        expect(stale).to_be_visible(timeout=SLOW)
        expect(stale).to_contain_text(re.compile(r"data of \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"))
        expect(page.locator("[data-stale]")).to_have_count(7)
        note = page.locator("#approvals-panel [data-testid=stale-note]")
        expect(note).to_have_text(re.compile(r"^stale · as of \d{4}-"))
        # the last good data stays on screen
        expect(page.locator(f'[data-testid=approval-row][data-call-id="{parked}"]')).to_be_visible()
    except BaseException:
        pages.close()
        raise
    next(pages, None)


def test_runs_list_bulk_approve_and_retry(api, inproc, page):
    inproc.start()
    parked = dispatch(api, "run-bulk", *[(f"w{i}", "wipe", {"target": f"t{i}"}) for i in range(3)])
    [boom] = dispatch(api, "run-fail", ("b", "boom", {}))
    sign_in(page)
    bulk = page.locator('[data-testid=run-row][data-run-id="run-bulk"]')
    expect(bulk).to_contain_text("3 awaiting approval", timeout=SLOW)
    expect(page.locator('[data-testid=run-row][data-run-id="run-fail"]')).to_be_visible()

    # one click approves the run's parked calls (the admin is not their submitter), once
    # the approver has seen each with its arguments: those are what the request names
    asked: list[str] = []

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    bulk.get_by_test_id("approve-run").click()
    expect(bulk).to_contain_text("3 succeeded", timeout=SLOW)
    assert "Approve these 3 call(s) of run run-bulk?" in asked[0]
    assert asked[0].count("• wipe (") == 3, asked
    assert all(f'"target": "t{i}"' in asked[0] for i in range(3)), asked
    expect(bulk.get_by_test_id("approve-run")).to_have_count(0)
    for call_id in parked:
        assert httpx.get(f"{api}/v1/calls/{call_id}", headers=h("agent-t")).json()["status"] == (
            "succeeded"
        )

    # a failed call is retried as a new call of the same run
    failed = page.locator(f'#calls tr[data-call-id="{boom}"]')
    expect(failed.locator(".badge[data-state]")).to_have_text("failed", timeout=SLOW)
    page.once("dialog", lambda dialog: dialog.accept())
    failed.get_by_test_id("retry").click()
    runs = page.get_by_test_id("call-row").filter(
        has=page.locator("button.run-id", has_text="run-fail")
    )
    expect(runs).to_have_count(2, timeout=SLOW)
    again = httpx.get(f"{api}/v1/calls/{boom}", headers=h("agent-t")).json()["retried_by"]
    assert again and again != boom
    # the call page offers Retry only while the call was not retried
    page.goto(f"{api}/#/calls/{boom}")
    expect(page.locator("#call-state .badge[data-state]")).to_have_text("failed")
    expect(page.locator("#call-retry")).to_be_hidden()
    page.goto(f"{api}/#/calls/{again}")
    expect(page.locator("#call-state .badge[data-state]")).to_have_text("failed", timeout=SLOW)
    expect(page.locator("#call-retry")).to_be_visible()
