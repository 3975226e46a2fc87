"""Tools whose undo is slow and records itself: for the undo kill -9 and race tests."""

from __future__ import annotations

import os
import time

from toolq import ToolContext, ToolOutput, ToolRegistry
from toolq.results.connection import redis_client

registry = ToolRegistry()


def _slow_undo(undo_data: dict[str, object]) -> None:
    """Record the start (``test:undo:<call>``), sleep, record the end (``test:undone:<call>``)."""
    client = redis_client(os.environ.get("TOOLQ_REDIS_URL") or os.environ["TOOLQ_TEST_REDIS_URL"])
    call_id = str(undo_data["call_id"])
    client.rpush(f"test:undo:{call_id}", str(os.getpid()))
    time.sleep(float(str(undo_data["seconds"])))
    client.rpush(f"test:undone:{call_id}", str(os.getpid()))


@registry.tool(undo=_slow_undo)
def slow_undoable(seconds: float, ctx: ToolContext) -> ToolOutput:
    """Succeeds at once; its undo takes ``seconds``."""
    return ToolOutput.ok("done", undo_metadata={"call_id": ctx.call_id, "seconds": seconds})


@registry.tool(idempotent=True, undo=_slow_undo)
def slow_undoable_idempotent(seconds: float, ctx: ToolContext) -> ToolOutput:
    """Like ``slow_undoable``, marked idempotent: its undo may be run again."""
    return ToolOutput.ok("done", undo_metadata={"call_id": ctx.call_id, "seconds": seconds})
