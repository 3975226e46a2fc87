"""The HTTP API served by uvicorn on a free port, over the suite's private Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import serve
from toolq.api.app import create_app
from toolq.settings import ApiToken

TOKENS = {
    "admin-t": ApiToken(principal="root", roles=["admin"]),
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "other-t": ApiToken(principal="mallory", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(
        principal="alice", roles=["viewer", "approver:moderate", "approver:dangerous"]
    ),
    "bob-t": ApiToken(principal="bob", roles=["viewer", "approver:moderate"]),
    "view-t": ApiToken(principal="watcher", roles=["viewer"]),
    "self-t": ApiToken(principal="agent", roles=["viewer", "approver:dangerous"]),
    "acme-t": ApiToken(principal="acme-bot", roles=["submitter", "viewer"], tenant="acme"),
    "acme-view-t": ApiToken(principal="acme-eye", roles=["viewer"], tenant="acme"),
}


@pytest.fixture
def api(settings) -> Iterator[str]:
    from tests.apps import registry

    yield from serve(create_app(settings, registry, tokens=TOKENS))


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
