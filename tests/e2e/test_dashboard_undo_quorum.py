"""The dashboard's Undo of a DANGEROUS call with a quorum: the first approver is told."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.test_undo_reviewed import _succeeded
from tests.conftest import serve
from tests.e2e import test_dashboard as base
from tests.e2e.test_dashboard import SLOW, TOKENS, expect, sign_in
from toolq.api.app import create_app

pytestmark = pytest.mark.e2e


@pytest.fixture
def quorum_api(settings) -> Iterator[str]:
    from tests.apps import registry

    two = settings.model_copy(update={"dangerous_approvals": 2})
    yield from serve(create_app(two, registry, tokens=TOKENS))


@pytest.fixture
def quorum_page(quorum_api) -> Iterator[Any]:
    yield from base.browse(quorum_api)


def test_the_first_approver_of_a_quorum_undo_is_told_it_awaits_others(
    quorum_api, quorum_page, client, inproc, r
):
    """The first approver confirms the Undo of a DANGEROUS call that needs two: the API
    answers 202 awaiting_approvals, which undoCall reads as an event (``event.type.replace``
    on undefined): the approver gets an error toast ("undefined: Cannot read properties of
    undefined ...") instead of being told the undo awaits another approver."""
    inproc.start()
    call_id = _succeeded(client, "deploy", {"service": "api", "replicas": 2}, "r-dash-q")
    page = quorum_page
    sign_in(page)
    page.goto(f"{quorum_api}/#/calls/{call_id}")
    undo = page.locator("#call-undo")
    expect(undo).to_be_visible(timeout=SLOW)
    page.once("dialog", lambda dialog: dialog.accept())
    undo.click()
    toast = page.locator("#toast")
    expect(toast).not_to_be_empty(timeout=SLOW)
    assert r.hget(f"toolq:call:{call_id}", "undo_votes") is not None  # the 202 happened
    text = toast.inner_text()
    assert "undefined" not in text, text
    assert "approv" in text.lower(), text
