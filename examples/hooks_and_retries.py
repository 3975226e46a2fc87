"""Hooks in order, an error turned into a message, retries and a timeout, approval rules.

Ported from pai-agent-sdk's Toolset. Run it against a local stack from the repository root, with
the same ``TOOLQ_REDIS_URL`` in both shells::

    toolq dev --app examples.hooks_and_retries:registry   # shell 1
    python -m examples.hooks_and_retries                  # shell 2

Hooks run on the worker; each one reports itself as a ``call.progress`` event, so the script
prints the order they ran in: global_pre → tool_pre → execute → tool_post → global_post (and the
``Monitoring`` middleware, registered first, outermost, last). A tool post-hook turns
``FileNotFoundError`` into a friendly message; a flaky tool succeeds on its third attempt
(``retries=``, ``retry_on=``) and a slow one hits its ``timeout=``. Finally the run's
``need_user_approve_tools`` (``approvals.set_rules(run_id, approve_tools=[...])``) parks a
``shell`` call, is exported with ``export_state`` and restored onto a new run, where it parks
``shell`` again; the script approves both itself.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import uuid
from pathlib import Path
from typing import Any

from examples._shared import connect, example_dir, expect, parked, run, show
from toolq import (
    CallResult,
    CallStatus,
    Client,
    EventType,
    Middleware,
    RiskLevel,
    Tool,
    ToolContext,
    ToolRegistry,
)

registry = ToolRegistry()


def workspace() -> Path:
    """The directory ``read_file`` and ``shell`` work in (shared by workers and script)."""
    return example_dir("hooks_and_retries")


class ReadFileTool(Tool):
    """Read contents of a file."""

    name = "read_file"
    description = "Read contents of a file"

    def is_available(self) -> bool:
        """Hidden from the model (and refused) while there is no workspace."""
        return workspace().is_dir()

    def instructions(self, ctx: ToolContext | None = None) -> str:
        """Injected into the system prompt by ``registry.instructions()``."""
        return "Use read_file for files in the workspace; paths are relative to it."

    async def call(self, ctx: ToolContext, path: str) -> str:
        """pai's ``BaseTool.call``: the actual work."""
        ctx.progress({"hook": "execute"})
        return await asyncio.to_thread((workspace() / path).read_text)

    async def execute(self, ctx: ToolContext, path: str) -> str:
        """Read a file.

        Args:
            path: File path, relative to the workspace.
        """
        return await self.call(ctx, path)


class ShellTool(Tool):
    """Execute shell commands."""

    name = "shell"
    description = "Execute shell commands"
    risk = RiskLevel.MODERATE  # not parked by default; the run's approval list parks it

    def approval_metadata(self) -> dict[str, Any] | None:
        """pai's ``get_approval_metadata``: shown to approvers."""
        return {"warning": "This will execute a shell command", "risk_level": "high"}

    def execute(self, ctx: ToolContext, command: str) -> str:
        """Run a command (split like a shell would, but run without one).

        Args:
            command: The command line.
        """
        proc = ctx.popen(
            shlex.split(command), cwd=workspace(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        out, _ = proc.communicate(timeout=30)
        return out.decode()


registry.register(ReadFileTool)
registry.register(ShellTool)


@registry.tool(retries=3, retry_on=(ConnectionError,), timeout=5)
def flaky_api(ctx: ToolContext, query: str) -> dict[str, Any]:
    """An upstream that drops the first two connections of every call.

    Args:
        query: What to ask.
    """
    if ctx.attempt < 3:
        raise ConnectionError(f"connection reset (attempt {ctx.attempt})")
    return {"query": query, "answer": 42, "attempt": ctx.attempt}


@registry.tool(timeout=0.5)
async def slow_report(pages: int) -> str:
    """A report that takes far longer than its time limit.

    Args:
        pages: How many pages.
    """
    await asyncio.sleep(pages)
    return f"{pages} pages"


# -- hooks: the order pai documents, each reporting itself as a progress event -----------------


class Monitoring(Middleware):
    """A global middleware class (pai's monitoring_hook): counts successes and errors.

    Registered first, it is the outermost layer: its after-hook sees the final outcome.
    """

    def after_execute(self, ctx: ToolContext, tool: Tool, outcome: Any) -> Any:
        """Pass the outcome through unchanged; report whether it was an error."""
        kind = "error" if isinstance(outcome, BaseException) else "success"
        ctx.progress({"hook": "monitoring", "metric": f"tool.{tool.name}.{kind}"})
        return outcome


async def global_pre(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Runs first, before every tool."""
    ctx.progress({"hook": "global_pre", "tool": ctx.tool_name})
    return args


async def global_post(ctx: ToolContext, result: Any) -> Any:
    """Runs after every tool's own post-hooks (``Monitoring``, added first, wraps it)."""
    ctx.progress({"hook": "global_post", "tool": ctx.tool_name})
    return result


async def read_file_pre(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Per-tool pre-hook: paths are relative to the workspace."""
    ctx.progress({"hook": "tool_pre"})
    return {**args, "path": args["path"].lstrip("/")}


async def error_recovery_hook(ctx: ToolContext, result: Any) -> Any:
    """Per-tool post-hook: a missing file becomes a message the model can act on."""
    ctx.progress({"hook": "tool_post", "saw": type(result).__name__})
    if isinstance(result, FileNotFoundError):
        return "File not found. Please check the path."
    return result  # other errors stay errors


registry.use(Monitoring())
registry.before(global_pre)
registry.after(global_post)
registry.before(read_file_pre, tool="read_file")
registry.after(error_recovery_hook, tool="read_file")


# -- the example -------------------------------------------------------------------------------


def hooks_of(client: Client, result: CallResult) -> list[str]:
    """The hooks that ran for a call, in order, from its progress events."""
    assert result.run_id is not None
    return [
        e.data["data"]["hook"]
        for e in client.events(result.run_id)
        if e.call_id == result.call_id
        and e.type is EventType.PROGRESS
        and isinstance(e.data.get("data"), dict)
        and "hook" in e.data["data"]
    ]


def approve_parked(client: Client, result_id: str) -> None:
    """Show what the approver sees, then approve."""
    request = parked(client, result_id)
    show(
        f"approve {request.name}?",
        {"arguments": request.arguments, "metadata": request.approval_metadata},
    )
    client.approvals.approve(result_id, by="example-approver", digest=request.digest)


def example(client: Client) -> None:
    """Hook order, error recovery, retry and timeout, approval lists exported and restored."""
    (workspace() / "notes.txt").write_text("alpha\n")
    run_id = f"hooks-{uuid.uuid4().hex[:8]}"
    print(registry.instructions())

    batch = client.dispatch(
        [
            {"id": "read_ok", "name": "read_file", "arguments": {"path": "/notes.txt"}},
            {"id": "read_missing", "name": "read_file", "arguments": {"path": "missing.txt"}},
            {"id": "flaky", "name": "flaky_api", "arguments": {"query": "meaning"}},
            {"id": "slow", "name": "slow_report", "arguments": {"pages": 5}},
        ],
        run_id=run_id,
    )
    ok, missing, flaky, slow = batch.wait(timeout=60)

    order = hooks_of(client, ok)
    print(f"read_file {ok.output!r}; hooks: {' -> '.join(order)}")
    expect(ok.output == "alpha\n", "read_file did not read the file")
    expect(
        order == ["global_pre", "tool_pre", "execute", "tool_post", "global_post", "monitoring"],
        f"hooks ran out of order: {order}",
    )
    print(f"read_file missing.txt: {missing.status.value}: {missing.output!r}")
    expect(missing.ok and missing.output == "File not found. Please check the path.", "no recovery")

    retries = [
        e
        for e in client.events(run_id)
        if e.call_id == flaky.call_id and e.type is EventType.RETRYING
    ]
    print(f"flaky_api: {flaky.output} after {flaky.attempts} attempts ({len(retries)} retries)")
    expect(flaky.ok and flaky.attempts == 3 and len(retries) == 2, "retry did not happen")
    print(f"slow_report: {slow.status.value} ({slow.error_type}): {slow.error}")
    expect(slow.status is CallStatus.FAILED and slow.error_type == "timeout", "no timeout")
    expect("tool.slow_report.error" in str(list(client.events(run_id))), "monitoring missed it")

    # need_user_approve_tools: a per-run list, kept in Redis, exported and restored
    client.approvals.set_rules(run_id, approve_tools=["shell", "edit", "replace"])
    shell = client.dispatch(
        [{"id": "sh1", "name": "shell", "arguments": {"command": "ls"}}], run_id=run_id
    )
    expect(shell.calls[0].status is CallStatus.AWAITING_APPROVAL, "shell was not parked")
    approve_parked(client, shell.call_ids[0])
    [listed] = shell.wait(timeout=60)
    print(f"shell ls -> {listed.output!r}")
    expect(listed.ok and "notes.txt" in str(listed.output), "shell did not run")

    state = client.approvals.export_state(run_id)
    show("exported approval state", state)
    restored_run = f"{run_id}-restored"
    client.approvals.restore_state(restored_run, state)
    rules = client.approvals.rules(restored_run)
    expect(set(rules.approve_tools) == {"shell", "edit", "replace"}, "state not restored")
    again = client.dispatch(
        [{"id": "sh2", "name": "shell", "arguments": {"command": "echo restored"}}],
        run_id=restored_run,
    )
    expect(again.calls[0].status is CallStatus.AWAITING_APPROVAL, "restored list not applied")
    approve_parked(client, again.call_ids[0])
    [echoed] = again.wait(timeout=60)
    print(f"shell in the restored run -> {echoed.output!r}")
    expect(echoed.output == "restored\n", "restored-run shell did not run")


def main(client: Client | None = None) -> int:
    """Run the example against workers serving this registry."""
    with connect(registry, client) as active:
        return run(example, active)


if __name__ == "__main__":
    raise SystemExit(main())
