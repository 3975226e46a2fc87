"""Numbers beyond 2**53 in the dashboard: an approver sees and approves them exactly.

A browser's ``JSON.parse`` rounds integers beyond 2**53: before, a parked transfer to
account 12345678901234567 was shown as 12345678901234568, and an edited one was sent
rounded. The dashboard shows the API's ``arguments_text`` and sends edits as typed.
"""

from __future__ import annotations

import httpx
import pytest

from tests.e2e import test_dashboard as base
from tests.e2e.test_dashboard import SLOW, card, dispatch, expect, h, sign_in

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
