"""Two calls of a tool the server just added, asked for at once in one
worker process (threads pool, or an async call beside a sync one)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.registry.upstream.conftest import HttpUpstream
from toolq import CallStatus
from toolq.registry.upstream import toolset as toolset_module

SLOW = 0.5  # seconds the server takes to answer tools/list


def test_a_call_asked_while_a_listing_is_under_way_waits_for_it(
    http_upstream: HttpUpstream, new_registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call of ``tickets_extra`` lists again; the second, asked while that listing
    is under way, returned None at once (throttled by the listing it did not wait for) and
    failed ``tool_not_found``, though the listing under way finds the tool."""
    server = {"url": http_upstream.url, "headers": {"Authorization": "Bearer tok-lister-5b1d"}}
    worker = new_registry()
    worker.mcp_server("tickets", **server)
    other = new_registry()
    other.mcp_server("tickets", **server)
    assert other.invoke("tickets_grow", {}).status is CallStatus.SUCCEEDED  # server adds it

    listing = toolset_module.McpToolset._list_once

    async def slow_list(self):  # type: ignore[no-untyped-def]
        await asyncio.sleep(SLOW)
        return await listing(self)

    monkeypatch.setattr(toolset_module.McpToolset, "_list_once", slow_list)
    found: dict[str, object] = {}

    def look(who: str) -> None:
        found[who] = worker.find("tickets_extra")

    first = threading.Thread(target=look, args=("first",))
    first.start()
    time.sleep(SLOW / 5)  # the first call's listing is under way
    look("second")
    first.join()
    assert found["first"] is not None
    assert found["second"] is not None, "the second call did not wait for the listing"
