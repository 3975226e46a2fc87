"""An empty edit means one thing on every path: approve with no arguments (``{}``), which the
tool's defaults fill in, or which its required parameters refuse; never "no edit". (An absent
``arguments`` is no edit.) The HTTP API, ``ApprovalClient``, the CLI and the dashboard; the
framework adapters refuse every edit on resume, ``{}`` included (tests/integrations)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.approvals.conftest import Pair, executions, start_verifying
from tests.cli.test_cli import toolq
from tests.conftest import approve_shown, make_settings, serve
from tests.e2e.test_dashboard import SLOW, browse, card, expect, sign_in, state_of
from toolq import ApprovalClient, CallStatus
from toolq.api.app import create_app
from toolq.errors import InvalidArgumentsError
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "admin-t": ApiToken(principal="root", roles=["admin"]),
}
PURGE_DB = ("p", "purge", {"scope": "db"})  # purge's scope defaults to "cache"
WIPE_PROD = ("w", "wipe", {"target": "prod"})  # wipe's target is required


@pytest.fixture
def api(pair: Pair, inproc, r) -> Iterator[str]:
    from tests.apps import registry

    start_verifying(inproc, pair.verify)
    settings = make_settings(approval_signing_key=pair.signing)
    yield from serve(create_app(settings, registry, tokens=TOKENS))


def dispatch(api: str, run_id: str, *calls: tuple[str, str, dict]) -> list[str]:
    body = [{"id": i, "name": n, "arguments": a} for i, n, a in calls]
    sent = httpx.post(
        f"{api}/v1/runs/{run_id}/calls", json=body, headers={"Authorization": "Bearer agent-t"}
    )
    assert sent.status_code == 202, sent.text
    return [c["call_id"] for c in sent.json()["calls"]]


def final(api: str, call_id: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        call = httpx.get(
            f"{api}/v1/calls/{call_id}", headers={"Authorization": "Bearer agent-t"}
        ).json()
        if CallStatus(call["status"]).is_final or time.monotonic() > deadline:
            return call
        time.sleep(0.1)


def check_ran_defaults(api: str, purge: str, r) -> None:
    assert final(api, purge)["output"] == "purged cache"
    with ApprovalClient(api, "admin-t") as admin:
        request = admin.get(purge)
    assert request.arguments == {} and request.original_arguments == {"scope": "db"}
    assert executions(r, purge) == 1


def check_refused_and_parked(api: str, wipe: str, r) -> None:
    with ApprovalClient(api, "admin-t") as admin:
        request = admin.get(wipe)
    assert request.status is CallStatus.AWAITING_APPROVAL
    assert request.arguments == {"target": "prod"} and request.original_arguments is None
    assert executions(r, wipe) == 0


def test_http_api_body(api, r):
    purge, wipe = dispatch(api, "empty-http", PURGE_DB, WIPE_PROD)
    headers = {"Authorization": "Bearer admin-t"}
    refused = approve_shown(api, wipe, headers, arguments={})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_arguments"
    check_refused_and_parked(api, wipe, r)
    assert approve_shown(api, purge, headers, arguments={}).is_success
    check_ran_defaults(api, purge, r)
    # no "arguments" at all: no edit
    assert approve_shown(api, wipe, headers).is_success
    assert final(api, wipe)["output"] == "wiped prod"


def test_approval_client(api, r):
    purge, wipe = dispatch(api, "empty-client", PURGE_DB, WIPE_PROD)
    with ApprovalClient(api, "admin-t") as admin:
        with pytest.raises(InvalidArgumentsError):
            admin.approve(wipe, arguments={}, digest=admin.get(wipe).digest)
        check_refused_and_parked(api, wipe, r)
        admin.approve(purge, arguments={}, digest=admin.get(purge).digest)
        check_ran_defaults(api, purge, r)
        admin.approve(wipe, digest=admin.get(wipe).digest)  # arguments=None: no edit
    assert final(api, wipe)["output"] == "wiped prod"


def test_cli(api, r, pair, settings):
    purge, wipe = dispatch(api, "empty-cli", PURGE_DB, WIPE_PROD)

    def approve(call_id: str, *args: str) -> object:
        with ApprovalClient(api, "admin-t") as admin:
            digest = admin.get(call_id).digest
        return toolq(
            "approvals",
            "approve",
            call_id,
            "--by",
            "ops",
            "--app",
            "tests.apps:registry",
            "--digest",
            digest,
            *args,
            settings=settings,
            TOOLQ_APPROVAL_SIGNING_KEY=pair.signing,
        )

    refused = approve(wipe, "--args", "{}")
    assert refused.returncode == 1 and "invalid arguments" in refused.stderr
    check_refused_and_parked(api, wipe, r)
    done = approve(purge, "--args", "{}")
    assert done.returncode == 0, done.stderr
    check_ran_defaults(api, purge, r)


def test_dashboard(api, r):
    purge, wipe = dispatch(api, "empty-dashboard", PURGE_DB, WIPE_PROD)
    for page in browse(api):
        sign_in(page)
        for call_id in (wipe, purge):
            edit = card(page, call_id)
            edit.locator("summary").click()
            edit.locator("textarea").fill("{}")
            expect(edit.locator("button.approve")).to_have_text("Approve edited")
            edit.locator("button.approve").click()
        expect(card(page, wipe).locator(".err")).to_contain_text("invalid_arguments")
        expect(state_of(page, purge)).to_have_text("succeeded", timeout=SLOW)
    check_refused_and_parked(api, wipe, r)
    check_ran_defaults(api, purge, r)
