"""The ops dashboard in a real browser: uvicorn on a free port, real Redis, an in-process worker.

Needs the ``playwright`` package and a system Chromium at ``/usr/bin/chromium`` (Playwright's
own browser download is not used). Set ``TOOLQ_DASHBOARD_SCREENSHOTS`` to a directory to
save the screenshots used in the docs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import serve
from toolq.api.app import create_app
from toolq.models import FINAL_STATUSES
from toolq.quotas import Budget, TenantConfig
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKENS = {
    "admin-t": ApiToken(principal="root", roles=["admin"]),
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
}
SLOW = 20_000  # ms; waits that depend on workers


@pytest.fixture
def api(settings) -> Iterator[str]:
    from tests.apps import registry

    yield from serve(create_app(settings, registry, tokens=TOKENS))


@pytest.fixture
def page(api) -> Iterator[Any]:
    yield from browse(api)


def browse(api: str) -> Iterator[Any]:
    """A Chromium page on the dashboard at ``api``; fails on script errors and token leaks."""
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        context = browser.new_context(viewport={"width": 1440, "height": 1000})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # the strict CSP must not block anything the page needs
        page.on(
            "console",
            lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
        )
        urls: list[str] = []
        page.on("request", lambda request: urls.append(request.url))
        page.goto(api)
        yield page
        context.close()
        browser.close()
    assert not errors, f"JavaScript errors on the dashboard: {errors}"
    leaked = [u for u in urls if "token=" in u or "admin-t" in u]
    assert not leaked, f"the token left the Authorization header: {leaked}"


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def dispatch(api: str, run_id: str, *items: tuple[str, str, dict]) -> list[str]:
    body = [{"id": i, "name": n, "arguments": a} for i, n, a in items]
    posted = httpx.post(f"{api}/v1/runs/{run_id}/calls", json=body, headers=h("agent-t"))
    assert posted.status_code == 202, posted.text
    return [c["call_id"] for c in posted.json()["calls"]]


def sign_in(page: Any, token: str = "admin-t") -> None:
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", token)
    page.click("#login-btn")
    # the first reads behind it can be slow on a loaded machine with many calls (CI: > 5 s)
    expect(page.locator("#app")).to_be_visible(timeout=SLOW)


def state_of(page: Any, call_id: str) -> Any:
    return page.locator(f'#calls tr[data-call-id="{call_id}"] .badge[data-state]')


def approval_row(page: Any, call_id: str) -> Any:
    return page.locator(f'[data-testid="approval-row"][data-call-id="{call_id}"]')


def card(page: Any, call_id: str) -> Any:
    """The full card of a pending call, opened from its row in the approvals table."""
    row = approval_row(page, call_id)
    full = page.locator(f'[data-testid="approval"][data-call-id="{call_id}"]')
    expect(row).to_be_visible(timeout=SLOW)
    if row.get_by_test_id("approval-expand").get_attribute("aria-expanded") != "true":
        row.get_by_test_id("approval-expand").click()
    return full


def screenshot(page: Any, name: str) -> None:
    folder = os.environ.get("TOOLQ_DASHBOARD_SCREENSHOTS")
    if folder:
        page.evaluate("document.getElementById('toast').replaceChildren(); window.scrollTo(0, 0)")
        page.screenshot(path=str(Path(folder) / name), full_page=True)


def test_overview_endpoint(api, inproc):
    inproc.start()
    echo, wipe, _ = dispatch(
        api,
        "ov",
        ("a", "echo", {"text": "x"}),
        ("b", "wipe", {"target": "t"}),
        ("c", "add", {"a": 1, "b": 2}),
    )
    assert httpx.get(f"{api}/v1/overview").status_code == 401
    deadline = time.monotonic() + 20
    while True:
        data = httpx.get(f"{api}/v1/overview", headers=h("agent-t")).json()
        states = {c["call_id"]: c["status"] for c in data["calls"]}
        if states[echo] == "succeeded":
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert data["workers"] == {"safe": 1, "moderate": 1, "dangerous": 1}
    assert data["queues"] == {"safe": 0, "moderate": 0, "dangerous": 0}
    assert data["pending_approvals"] == 1
    assert data["final_states"] == sorted(status.value for status in FINAL_STATUSES)
    assert states[wipe] == "awaiting_approval"
    row = next(c for c in data["calls"] if c["call_id"] == echo)
    assert row["run_id"] == "ov" and row["risk"] == "safe" and row["duration_ms"] >= 0
    assert "arguments" not in row and "output" not in row
    only = httpx.get(
        f"{api}/v1/overview",
        params={"risk": "dangerous", "state": "awaiting_approval", "tool": "wipe"},
        headers=h("agent-t"),
    ).json()["calls"]
    assert [c["call_id"] for c in only] == [wipe]
    by_run = httpx.get(
        f"{api}/v1/overview", params={"run_id": "ov", "limit": 2}, headers=h("agent-t")
    ).json()["calls"]
    assert len(by_run) == 2 and {c["run_id"] for c in by_run} == {"ov"}
    bad = httpx.get(f"{api}/v1/overview", params={"risk": "extreme"}, headers=h("agent-t"))
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def test_dashboard_approve_with_diff_and_run_timeline(api, inproc, page, tmp_path):
    inproc.start()
    sign_in(page)
    expect(page.get_by_test_id("workers-dangerous")).to_have_text("1", timeout=SLOW)
    target = tmp_path / "notes.txt"
    target.write_text("alpha\nbeta\ngamma\n")
    done = dispatch(
        api,
        "run-history",
        ("h1", "echo", {"text": "hello"}),
        ("h2", "add", {"a": 2, "b": 3}),
        ("h3", "boom", {}),
    )
    wipe, edit, count = dispatch(
        api,
        "run-deploy",
        ("w", "wipe", {"target": "staging-db"}),
        ("e", "edit_file", {"path": str(target), "content": "alpha\nBETA\ngamma\ndelta\n"}),
        ("c", "countdown", {"n": 3}),
    )
    expect(card(page, wipe)).to_be_visible()
    expect(card(page, wipe).get_by_test_id("arguments")).to_contain_text("staging-db")
    diff = card(page, edit).get_by_test_id("diff")
    expect(diff.locator(".del")).to_have_text(["-beta"])
    expect(diff.locator(".add")).to_have_text(["+BETA", "+delta"])
    expect(card(page, edit)).to_contain_text("overwrites the file")  # approval metadata
    expect(page.get_by_test_id("pending-count")).to_have_text("2")
    expect(state_of(page, done[2])).to_have_text("failed", timeout=SLOW)
    expect(state_of(page, count)).to_have_text("succeeded", timeout=SLOW)
    expect(state_of(page, wipe)).to_have_text("awaiting approval")
    # the charts redraw once new calls finish, without waiting for their 10 s refresh
    expect(page.locator('#chart-rates path[data-series="failed"]')).to_have_count(1, timeout=8000)
    expect(page.locator('#chart-durations path[data-series="countdown p99"]')).to_have_count(1)
    # parked rows (badge and Cancel button) and all: nothing wider than the window
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, "dashboard.png")

    card(page, wipe).locator("button.approve").click()
    expect(approval_row(page, wipe)).to_have_count(0)
    expect(page.get_by_test_id("approval")).to_have_count(1)
    expect(state_of(page, wipe)).to_have_text("succeeded", timeout=SLOW)
    result = httpx.get(f"{api}/v1/calls/{wipe}", headers=h("agent-t")).json()
    assert result["output"] == "wiped staging-db"

    # approve with edited arguments: the edit is what runs
    edited = card(page, edit)
    edited.locator("summary").click()
    edited.locator("textarea").fill(f'{{"path": "{target}", "content": "edited\\n"}}')
    expect(edited.locator("button.approve")).to_have_text("Approve edited")
    edited.locator("button.approve").click()
    expect(state_of(page, edit)).to_have_text("succeeded", timeout=SLOW)
    assert target.read_text() == "edited\n"

    # the run view streams the run's events over SSE, opened with a ticket (not the token)
    page.locator(f'#calls tr[data-call-id="{wipe}"] button.link').click()
    expect(page.locator("#run-panel")).to_be_visible()
    expect(page.locator("#run-title")).to_have_text("run-deploy")
    timeline = page.get_by_test_id("event")
    expect(timeline.filter(has_text="approved").first).to_be_visible(timeout=SLOW)
    expect(page.locator("#timeline li[data-type='call.succeeded']")).to_have_count(3, timeout=SLOW)
    expect(page.locator("#timeline li[data-type='call.progress']")).to_have_count(4)
    expect(page.locator("#run-calls tbody tr")).to_have_count(3)
    # live: an event after the stream opened arrives without a reload
    dispatch(api, "run-deploy", ("late", "echo", {"text": "late"}))
    expect(page.locator("#timeline li[data-type='call.succeeded']")).to_have_count(4, timeout=SLOW)
    expect(page.locator("#stream-state")).to_have_text("streaming")
    screenshot(page, "dashboard-run.png")


def test_dashboard_deny_with_reason_filters_and_escaping(api, inproc, page):
    inproc.start()
    page.fill("#token", "wrong")
    page.click("#login-btn")
    expect(page.locator("#login-error")).to_have_text("That token was not accepted.")
    sign_in(page)
    hostile = "<img src=x onerror=window.pwned=1><b>bold</b>"
    [wipe] = dispatch(api, "run-deny", ("w", "wipe", {"target": hostile}))
    [other] = dispatch(api, "run-other", ("x", "echo", {"text": "unrelated"}))
    pending = card(page, wipe)
    expect(pending.get_by_test_id("arguments")).to_contain_text(hostile)
    assert pending.locator("img, b").count() == 0
    assert page.evaluate("window.pwned") is None

    # filters narrow both panels
    page.fill("#filters input[name=run_id]", "run-other")
    expect(page.locator("#calls tbody tr")).to_have_count(1)
    expect(page.get_by_test_id("approval-row")).to_have_count(0)
    page.click("#filters button[type=reset]")
    page.select_option("#filters select[name=state]", "awaiting_approval")
    expect(page.locator("#calls tbody tr")).to_have_count(1)
    expect(state_of(page, wipe)).to_be_visible()
    page.select_option("#filters select[name=state]", "")
    expect(state_of(page, other)).to_have_text("succeeded", timeout=SLOW)

    pending.locator("input.reason").fill("not during the freeze")
    # A filter that hides the card rebuilds it when lifted: what was typed stays.
    page.fill("#filters input[name=run_id]", "run-other")
    expect(page.get_by_test_id("approval-row")).to_have_count(0)
    page.click("#filters button[type=reset]")
    expect(pending.locator("input.reason")).to_have_value("not during the freeze", timeout=SLOW)
    pending.locator("button.deny").click()
    expect(state_of(page, wipe)).to_have_text("denied", timeout=SLOW)
    expect(page.get_by_test_id("approval-row")).to_have_count(0)
    result = httpx.get(f"{api}/v1/calls/{wipe}", headers=h("agent-t")).json()
    assert result["status"] == "denied" and "not during the freeze" in result["error"]
    assert "pwned" not in str(page.evaluate("Object.keys(window)"))

    # the token survives a reload; signing out forgets it
    page.reload()
    expect(page.locator("#app")).to_be_visible()
    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()
    assert page.evaluate("localStorage.getItem('toolq.token')") is None


TENANTS = {
    "acme": TenantConfig(weight=2, concurrency=3, rate_limit="10/s", budget=Budget(limit=5)),
}


@pytest.fixture
def tenants_api(settings) -> Iterator[str]:
    from tests.tenants.app import registry

    configured = settings.model_copy(update={"tenants": TENANTS})
    yield from serve(create_app(configured, registry, tokens=TOKENS))


def test_dashboard_tenants_panel(tenants_api):
    for n in range(2):
        posted = httpx.post(
            f"{tenants_api}/v1/runs/t{n}/calls",
            params={"tenant": "acme"},
            json=[{"id": "c", "name": "charged", "arguments": {"text": "x"}}],
            headers=h("agent-t"),
        )
        assert posted.status_code == 202, posted.text
    posted = httpx.post(
        f"{tenants_api}/v1/runs/g/calls",
        params={"tenant": "acme"},
        json=[{"id": "g", "name": "gated", "arguments": {"target": "x"}}],
        headers=h("agent-t"),
    )
    assert posted.json()["calls"][0]["status"] == "awaiting_approval"
    pages = browse(tenants_api)
    page = next(pages)
    try:
        sign_in(page)
        row = page.locator('[data-testid="tenant-row"][data-tenant="acme"]')
        expect(row).to_be_visible()
        expect(row.locator('[data-testid="tenant-used"]')).to_have_text("3")
        expect(row.locator('[data-testid="tenant-left"]')).to_have_text("2")
        expect(row.locator('[data-testid="tenant-queued"]')).to_have_text("2")
        expect(row.locator('[data-testid="tenant-parked"]')).to_have_text("1")
        expect(row.locator('[data-testid="tenant-running"]')).to_have_text("0")
        expect(row).to_contain_text("10/1s")
        limited = page.locator('[data-testid="tool-limit-row"][data-tool="limited"]')
        expect(limited).to_contain_text("2")
        expect(page.locator('[data-testid="tool-limit-row"][data-tool="printed"]')).to_contain_text(
            "f(args)"
        )
        expect(page.locator('[data-testid="tool-limit-row"][data-tool="free"]')).to_have_count(0)
        screenshot(page, "dashboard-tenants.png")
    except BaseException:
        pages.close()
        raise
    next(pages, None)  # the browser's own checks: no script error, no token in a URL
