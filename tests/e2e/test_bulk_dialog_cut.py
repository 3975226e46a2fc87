"""The dashboard's bulk approve asks in a native confirm() that Chromium cuts.

Chromium shows a JavaScript dialog's message in at most 32 rows of 132 columns on Linux
(``kMessageTextMaxRows``/``kMessageTextMaxCols``, 3000 characters elsewhere) and elides the
rest, so what an approver confirms is not the whole list of arguments that is then approved.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.e2e.test_dashboard import SLOW, api, dispatch, expect, h, page, sign_in  # noqa: F401

pytestmark = pytest.mark.e2e

ROWS, COLS = 32, 132


def test_bulk_approve_never_approves_arguments_the_dialog_cannot_show(api, page):  # noqa: F811
    target = "staging-db " + "." * 5000 + " AND production-db"
    [call_id] = dispatch(api, "run-cut", ("w1", "wipe", {"target": target}))
    sign_in(page)
    bulk = page.locator('[data-testid=run-row][data-run-id="run-cut"]')
    expect(bulk).to_contain_text("1 awaiting approval", timeout=SLOW)
    asked: list[str] = []

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    bulk.get_by_test_id("approve-run").click()
    deadline = time.monotonic() + 10
    while not asked and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    page.wait_for_timeout(1000)
    status = httpx.get(f"{api}/v1/calls/{call_id}", headers=h("agent-t")).json()["status"]
    if asked and status != "awaiting_approval":
        lines = asked[0].split("\n")
        fits = len(lines) <= ROWS and all(len(line) <= COLS for line in lines)
        assert fits, (
            f"bulk approve approved a call ({status}) whose arguments the confirm dialog cut: "
            f"{len(asked[0])} characters in {len(lines)} lines, the longest "
            f"{max(map(len, lines))}; Chromium shows {ROWS} rows of {COLS} columns"
        )
