"""The approval page every notification links to, in Chromium at a phone's viewport.

Real HTTP API (uvicorn), real Redis, an in-process worker verifying the API's signatures.
Set ``TOOLQ_DASHBOARD_SCREENSHOTS`` to a directory to save the screenshots used in the docs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.approvals.conftest import Pair, executions
from tests.conftest import approve_shown, make_settings, serve
from tests.e2e.test_dashboard import CHROMIUM, CHROMIUM_ARGS, dispatch, expect, h
from toolq.api.app import create_app
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

PHONE = {"width": 390, "height": 844}
APPROVER = ["viewer", "approver:moderate", "approver:dangerous"]
TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(principal="alice", roles=APPROVER),
    "bob-t": ApiToken(principal="bob", roles=APPROVER),
    "viewer-t": ApiToken(principal="vera", roles=["viewer"]),
}


@pytest.fixture
def api(inproc, r) -> Iterator[str]:
    from tests.apps import registry

    pair = Pair()
    inproc.start(approval_verify_keys=pair.verify, dangerous_approvals=2)
    settings = make_settings(approval_signing_key=pair.signing, dangerous_approvals=2)
    yield from serve(create_app(settings, registry, tokens=TOKENS))


@pytest.fixture
def phone(api) -> Iterator[Any]:
    """A touch browser of a phone's size; fails on script errors, CSP blocks, token leaks."""
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        context = browser.new_context(
            viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=2
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on(
            "console",
            lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
        )
        urls: list[str] = []
        page.on("request", lambda request: urls.append(request.url))
        yield page
        context.close()
        browser.close()
    assert not errors, f"JavaScript errors on the approval page: {errors}"
    leaked = [u for u in urls if any(secret in u for secret in ("tqd_", *TOKENS))]
    assert not leaked, f"a credential left the Authorization header: {leaked}"


def shot(page: Any, name: str) -> None:
    folder = os.environ.get("TOOLQ_DASHBOARD_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / name))  # what the phone's screen shows


def status(api: str, call_id: str) -> dict[str, Any]:
    return httpx.get(f"{api}/v1/calls/{call_id}", headers=h("agent-t")).json()


def wait_status(api: str, call_id: str, *states: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while (call := status(api, call_id))["status"] not in states:
        assert time.monotonic() < deadline, call
        time.sleep(0.05)
    return call


def fits(page: Any) -> bool:
    """No sideways scrolling: the page is as wide as the phone."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_an_approver_reviews_and_approves_on_a_phone(api, phone, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("line one\nline two\n")
    [call_id] = dispatch(
        api,
        "run-phone",
        ("e1", "edit_file", {"path": str(target), "content": "line one\nline 2\n"}),
    )
    phone.goto(f"{api}/approve/{call_id}")
    expect(phone.locator("#login")).to_be_visible()
    phone.fill("#token", "alice-t")
    phone.click("#login button")
    expect(phone.locator("#tool")).to_have_text("edit_file")
    expect(phone.locator("[data-testid=status]")).to_have_text("awaiting approval")
    expect(phone.locator("[data-testid=arguments]")).to_contain_text("line 2")
    expect(phone.locator("[data-testid=preview]")).to_contain_text("line two")
    expect(phone.locator("[data-testid=diff]")).to_contain_text("+line 2")
    expect(phone.locator("[data-testid=event]").first).to_contain_text("awaiting_approval")
    expect(phone.locator("#facts")).to_contain_text("agent")
    assert fits(phone)
    box = phone.locator("#approve").bounding_box()
    assert box["height"] >= 44 and box["width"] >= 140  # a thumb's target
    shot(phone, "approval-page-phone.png")
    phone.locator("#approve").tap()
    expect(phone.locator("#outcome")).to_contain_text("decided by alice", timeout=20_000)
    assert wait_status(api, call_id, "succeeded")["status"] == "succeeded"
    assert target.read_text() == "line one\nline 2\n"
    expect(phone.locator("#approve")).to_be_hidden()
    approved = phone.locator("[data-testid=event]").filter(has_text="approved by alice")
    expect(approved).to_have_count(1)


def test_who_else_approved_and_a_quorum_on_a_phone(api, phone):
    [call_id] = dispatch(api, "run-quorum", ("w1", "wipe", {"target": "db"}))
    first = approve_shown(api, call_id, h("bob-t"))
    assert first.status_code == 200, first.text
    phone.goto(f"{api}/approve/{call_id}")
    phone.fill("#token", "alice-t")
    phone.click("#login button")
    expect(phone.locator("#facts")).to_contain_text("Approved by")
    expect(phone.locator("#facts")).to_contain_text("bob")
    expect(phone.locator("[data-testid=status]")).to_have_text("awaiting approval")
    phone.locator("#approve").tap()
    assert wait_status(api, call_id, "succeeded")["status"] == "succeeded"
    assert executions_of(call_id) == 1


def executions_of(call_id: str) -> int:
    import redis

    from tests.conftest import REDIS_URL

    return executions(redis.Redis.from_url(REDIS_URL), call_id)


def test_a_one_time_link_denies_with_a_reason_without_signing_in(api, phone):
    [call_id] = dispatch(api, "run-link", ("t1", "transfer", {"amount": 900}))
    shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("alice-t")).json()
    issued = httpx.post(
        f"{api}/v1/approvals/{call_id}/decision-token",
        headers=h("alice-t"),
        json={"digest": shown["digest"]},
    )
    assert issued.status_code == 200, issued.text
    token = issued.json()["token"]
    phone.goto(f"{api}/approve/{call_id}#token={token}")
    expect(phone.locator("#tool")).to_have_text("transfer")
    assert token not in phone.url  # off the address bar at once
    expect(phone.locator("#login")).to_be_hidden()
    phone.locator("#deny").tap()
    phone.fill("#reason", "over the weekly limit")
    shot(phone, "approval-page-deny.png")
    phone.locator("#deny").tap()
    expect(phone.locator("#outcome")).to_have_text("denied")
    call = wait_status(api, call_id, "denied")
    assert call["error"] == "denied by alice: over the weekly limit"
    # spent: the same link decides nothing more
    again = httpx.post(
        f"{api}/v1/decisions/{call_id}/approve",
        json={},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert again.status_code == 401


def test_a_viewer_sees_the_call_but_cannot_decide_it(api, phone):
    [call_id] = dispatch(api, "run-viewer", ("w1", "wipe", {"target": "db"}))
    phone.goto(f"{api}/approve/{call_id}")
    phone.fill("#token", "viewer-t")
    phone.click("#login button")
    expect(phone.locator("#tool")).to_have_text("wipe")
    phone.locator("#approve").tap()
    expect(phone.locator("#decide-error")).to_contain_text("forbidden")
    assert status(api, call_id)["status"] == "awaiting_approval"


def test_a_call_rewritten_under_the_reader_is_said_and_approve_waits(api, phone, r, tmp_path):
    """A Redis writer rewrites the call while the approver is on its page: the next read
    shows the new arguments, says the call changed and holds Approve for a few seconds
    (before, the page's next poll silently swapped them in, and a tap an instant later
    approved arguments the person had not read)."""
    from tests.approvals.test_digest_required import rewrite_arguments

    target = tmp_path / "notes.txt"
    target.write_text("old\n")
    [call_id] = dispatch(
        api, "run-swap", ("s1", "edit_file", {"path": str(target), "content": "harmless\n"})
    )
    phone.goto(f"{api}/approve/{call_id}")
    phone.fill("#token", "alice-t")
    phone.click("#login button")
    expect(phone.locator("[data-testid=arguments]")).to_contain_text("harmless")
    expect(phone.locator("[data-testid=changed]")).to_be_hidden()
    rewrite_arguments(r, call_id, {"path": str(target), "content": "EVIL\n"})
    expect(phone.locator("[data-testid=arguments]")).to_contain_text("EVIL", timeout=10_000)
    expect(phone.locator("[data-testid=changed]")).to_be_visible()
    expect(phone.locator("#approve")).to_be_disabled()
    expect(phone.locator("#approve")).to_be_enabled(timeout=10_000)  # after the hold
    phone.locator("#approve").tap()  # what the page showed, for the hold and since
    assert wait_status(api, call_id, "succeeded")["status"] == "succeeded"
    assert target.read_text() == "EVIL\n"
