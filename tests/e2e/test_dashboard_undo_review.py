"""The dashboard's Undo confirmation (call.js, ec03277) against a Redis writer, in Chromium."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.conftest import approve_shown
from tests.e2e import test_dashboard as base
from tests.e2e.test_dashboard import SLOW, dispatch, expect, h, sign_in

pytestmark = pytest.mark.e2e

api = base.api
page = base.page


def test_the_undo_confirmation_shows_all_the_undo_data_the_handler_gets(
    api, inproc, page, r, tmp_path
):
    """A Redis writer rewrites an approved edit's undo data before the approver opens it:
    a long ``before`` first, the file to overwrite after it. The confirmation shows it all,
    the path included (it cut the data at 2,000 characters, so the approver never saw the
    path, while the digest sent back covered it all)."""
    inproc.start()
    target = tmp_path / "edited.txt"
    target.write_text("before\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    [edit] = dispatch(
        api, "run-undo-cut", ("e", "edit_file", {"path": str(target), "content": "x"})
    )
    approved = approve_shown(api, edit, h("admin-t"))
    assert approved.status_code == 200, approved.text
    deadline = time.monotonic() + 30
    while httpx.get(f"{api}/v1/calls/{edit}", headers=h("admin-t")).json()["status"] != "succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    key = f"toolq:undo:{edit}"
    r.set(key, json.dumps({"before": "#" * 5000 + "\n", "path": str(victim)}))

    sign_in(page)
    page.goto(f"{api}/#/calls/{edit}")
    undo = page.locator("#call-undo")
    expect(undo).to_be_visible(timeout=SLOW)
    asked: list[str] = []
    # too long to show whole in a confirmation: not offered here at all

    def refuse(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    undo.click()
    expect(page.locator("#toast")).to_contain_text("too long to review", timeout=SLOW)
    page.remove_listener("dialog", refuse)
    assert asked == [] and victim.read_text() == "keep me\n"
    r.set(key, json.dumps({"before": "#" * 2500 + "\n", "path": str(victim)}))

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    undo.click()
    expect(page.locator("#call-timeline li[data-type='call.undone']")).to_have_count(
        1, timeout=SLOW
    )
    # the approver was shown the file the undo writes, and confirmed that
    assert str(victim) in asked[0], (asked[0][-200:], victim.read_text()[:20])
    assert victim.read_text() == "#" * 2500 + "\n"
