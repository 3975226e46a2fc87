"""Numbers beyond 2**53 in the dashboard: an approver sees and approves them exactly.

A browser's ``JSON.parse`` rounds integers beyond 2**53: before, a parked transfer to
account 12345678901234567 was shown as 12345678901234568, and an edited one was sent
rounded. The dashboard shows the API's ``arguments_text`` and sends edits as typed.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.e2e import test_dashboard as base
from tests.e2e.test_dashboard import SLOW, approval_row, card, dispatch, expect, h, sign_in

pytestmark = pytest.mark.e2e

api = base.api
page = base.page

BIG = 12345678901234567  # 17 digits: JSON.parse gives 12345678901234568


def test_an_approver_sees_and_edits_big_integers_exactly(api, page, r):
    [call_id] = dispatch(api, "run-big", ("t", "transfer", {"amount": BIG}))
    shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("admin-t")).json()
    assert str(BIG) in shown["arguments_text"]
    sign_in(page)
    full = card(page, call_id)
    expect(full.get_by_test_id("arguments")).to_contain_text(str(BIG), timeout=SLOW)
    # edit it to another big number, approved as typed
    full.locator("details.edit summary").click()
    full.locator("textarea").fill('{"amount": 98765432109876543}')
    full.locator("button.approve").click()
    envelope = None
    for _ in range(100):
        got = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("admin-t")).json()
        if got["status"] != "awaiting_approval":
            envelope = got
            break
        page.wait_for_timeout(100)
    assert envelope is not None, "never approved"
    assert envelope["arguments"] == {"amount": 98765432109876543}
    assert '"amount": 98765432109876543' in envelope["arguments_text"]


EDITED = 98765432109876543  # JSON.parse gives 98765432109876544


def test_the_approvals_row_shows_the_exact_number(api, page, r):
    """The row approvers scan first (it showed ``amount=12345678901234568``)."""
    [call_id] = dispatch(api, "run-row", ("t", "transfer", {"amount": BIG}))
    sign_in(page)
    row = approval_row(page, call_id)
    expect(row).to_contain_text(str(BIG), timeout=SLOW)


def test_the_call_page_shows_original_and_edited_numbers_exactly(api, page, r):
    """After an edit, the call page's arguments and original arguments are exact, and its
    timeline says the arguments were edited without a rounded copy of them (it showed
    ``edited: {"amount":98765432109876540}`` and an original of 12345678901234568)."""
    [call_id] = dispatch(api, "run-orig", ("t", "transfer", {"amount": BIG}))
    shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("admin-t")).json()
    body = json.dumps({"digest": shown["digest"], "arguments": {"amount": EDITED}})
    got = httpx.post(
        f"{api}/v1/approvals/{call_id}/approve",
        content=body,
        headers={**h("admin-t"), "Content-Type": "application/json"},
    )
    assert got.status_code == 200, got.text
    page.goto(f"{api}/#/calls/{call_id}")
    sign_in(page)
    expect(page.get_by_test_id("call-arguments")).to_contain_text(str(EDITED), timeout=SLOW)
    approved = page.locator("#call-timeline li[data-type='call.approved']")
    expect(approved).to_contain_text("arguments edited", timeout=SLOW)
    expect(page.locator("#call-body")).to_contain_text(str(BIG), timeout=SLOW)
    for rounded in ("12345678901234568", "98765432109876540", "98765432109876544"):
        assert rounded not in page.locator("#call-panel").inner_text()
