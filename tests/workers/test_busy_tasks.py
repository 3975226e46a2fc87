"""A slot running a preview counts as busy: no idle slot to hand a message's waiting calls to.

The ``Spiller`` gives a busy slot's waiting calls back for the worker's idle slots
(``Siblings.idle``); a thread computing a preview (or running an undo) is not one of them.
"""

from __future__ import annotations

import threading
import time

import redis

from toolq import Client, RiskLevel, Settings, ToolRegistry
from toolq.workers.runtime import WorkerRuntime
from toolq.workers.slots import Siblings

registry = ToolRegistry()
previewing = threading.Event()
release = threading.Event()


def _slow_preview(path: str) -> dict[str, str]:
    previewing.set()
    release.wait(30)
    return {"path": path}


@registry.tool(risk=RiskLevel.MODERATE, requires_approval=True, preview=_slow_preview)
def remove(path: str) -> str:
    """Remove a file."""
    return path


def test_a_slot_computing_a_preview_is_not_idle(r: redis.Redis, settings: Settings) -> None:
    with Client(registry, settings) as client:
        batch = client.dispatch([{"id": "p", "name": "remove", "arguments": {"path": "/x"}}])
        call_id = batch.call_ids[0]
    siblings = Siblings(2)
    runtime = WorkerRuntime(settings, registry, siblings=siblings)
    try:
        assert siblings.idle() == 2
        thread = threading.Thread(target=runtime.preview, args=(call_id,))
        thread.start()
        assert previewing.wait(30)
        assert siblings.idle() == 1  # the preview's slot is busy
        release.set()
        thread.join(30)
        assert not thread.is_alive()
        deadline = time.monotonic() + 10
        while siblings.idle() != 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        record = r.hgetall(f"{settings.key_prefix}:call:{call_id}")
        assert record[b"preview_state"] == b"ready"
    finally:
        release.set()
        runtime.close()
