"""Tools of the Sentinel tests: each execution is appended to a file, not to Redis.

A failover may lose the last writes to Redis; the file is the ground truth of how often a
call's handler ran.
"""

from __future__ import annotations

import os
import time

from toolq import RiskLevel, ToolContext, ToolRegistry

registry = ToolRegistry()


def executions(path: str) -> list[str]:
    """Call ids in the execution log at ``path``, one per handler run."""
    try:
        with open(path) as f:
            return [line.split()[0] for line in f if line.strip()]
    except FileNotFoundError:
        return []


@registry.tool()
def charge(amount: int, seconds: float, ctx: ToolContext) -> int:
    """Not idempotent: record this execution, then take ``seconds``."""
    fd = os.open(os.environ["TOOLQ_TEST_EXEC_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{ctx.call_id} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    time.sleep(seconds)
    return amount


@registry.tool(risk=RiskLevel.MODERATE, requires_approval=True)
def transfer(amount: int) -> int:
    """Needs an approval."""
    return amount
