"""A tool that retries with a backoff and may run again: for the retry-backoff variant."""

from __future__ import annotations

from tests.apps import Transient, record
from toolq import ToolContext, ToolRegistry

registry = ToolRegistry()


@registry.tool(idempotent=True, retries=3, retry_on=(Transient,))
def flaky_idempotent(failures: int, ctx: ToolContext) -> str:
    """Fails ``failures`` times with a transient error, then succeeds."""
    count = record(ctx, "flaky_idempotent")
    if count <= failures:
        raise Transient(f"transient failure {count}")
    return f"ok after {count}"
