"""Listing an upstream server again (``ToolRegistry.find``) for a tool the worker does not
know is done off the worker's event loop: on it, it held up every ``async def`` call of
the process while it listed."""

from __future__ import annotations

import asyncio
import time

import pytest

from toolq import CallStatus, Client, RiskLevel, Settings, ToolRegistry
from toolq.registry.upstream.connections import SessionLoop
from toolq.testing import TestWorker

LISTING_SECONDS = 1.5  # an upstream server that answers tools/list slowly (or not at all)


def build() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(risk=RiskLevel.SAFE)
    async def tick() -> float:
        """Twenty short awaits; returns how much longer than 1 s they took (loop lag)."""
        started = time.monotonic()
        for _ in range(20):
            await asyncio.sleep(0.05)
        return time.monotonic() - started - 1.0

    @registry.tool(risk=RiskLevel.SAFE)
    async def gone() -> str:
        """An upstream tool the server has since removed (this process heard list_changed)."""
        return "never"

    return registry


class SlowLister:
    """An upstream toolset whose server lists slowly: ``relist_for`` as McpToolset's does it,
    a listing on the process's session loop, waited for by the calling thread."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def relist_for(self, name: str) -> None:
        self.asked.append(name)
        SessionLoop.current().run(asyncio.sleep(LISTING_SECONDS), timeout=LISTING_SECONDS + 5)


@pytest.mark.e2e
def test_relisting_for_an_unknown_tool_does_not_hold_up_the_event_loop(
    settings: Settings,
) -> None:
    registry = build()
    worker = TestWorker(settings, registry, levels=[RiskLevel.SAFE])
    try:
        worker.app.toolq_runtimes.get()  # the runtime knows both tools as async ones
        registry.unregister("gone")  # then the server removed one
        lister = SlowLister()
        registry.toolsets.append(lister)  # type: ignore[arg-type]
        with Client(build(), settings) as client:
            worker.start(2, maintenance=False)
            ticking = client.dispatch([{"id": "t1", "name": "tick", "arguments": {}}], run_id="r")
            time.sleep(0.3)  # tick is running on the loop; a call of ``gone`` comes in
            going = client.dispatch([{"id": "g1", "name": "gone", "arguments": {}}], run_id="r")
            [gone] = going.wait(timeout=30)
            [tick] = ticking.wait(timeout=30)
        assert lister.asked == ["gone"]
        assert gone.status is CallStatus.FAILED and gone.error_type == "tool_not_found"
        assert tick.status is CallStatus.SUCCEEDED, tick.error
        lag = tick.output if isinstance(tick.output, float) else float(tick.content[0].text)
        # on the loop it held every call up the whole listing (1.5 s); a loaded machine adds
        # some lag to twenty short sleeps, not a second
        assert lag < 1.0, f"the event loop was held up {lag:.2f} s by the listing"
    finally:
        worker.stop()
        worker.close()
