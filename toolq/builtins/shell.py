"""Command tools: ``run_shell`` (an argv list, no shell) and, opt-in, ``run_shell_script``.

Both run in a :class:`~toolq.builtins.sandbox.Sandbox` (see there for the model) and stream
their output as progress events ``{"stream": "stdout" | "stderr", "text": ...}``.
``run_shell`` passes its argv straight to ``execvp``: ``;``, ``$(...)``, backticks and globs
are plain characters. It can still start a shell if one is on ``PATH``; the sandbox's user
and limits are the boundary, and ``allowed_commands`` narrows what may be started.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import Field

from toolq.builtins.sandbox import Isolation, Sandbox, SandboxLimits, SandboxTool, Timeout
from toolq.builtins.workspace import Workspace
from toolq.errors import ToolDeniedError
from toolq.execution.context import ToolContext
from toolq.registry.tool import Tool


class RunShell(SandboxTool):
    """Run a program with arguments in the workspace and return its exit code and output.

    No shell is involved: pass the program and each argument as separate list items
    (``["grep", "-n", "TODO", "main.py"]``); pipes, ``;``, ``$(...)`` and globs are not
    interpreted. Output is streamed while it runs and capped; the run is killed at its time
    limit (``timed_out``).
    """

    name = "run_shell"

    def __init__(
        self, workspace: Workspace, sandbox: Sandbox, allowed: frozenset[str] | None
    ) -> None:
        self.allowed = allowed
        super().__init__(workspace, sandbox)

    def execute(
        self,
        argv: Annotated[list[str], Field(min_length=1)],
        ctx: ToolContext,
        cwd: str = ".",
        timeout: Timeout | None = None,
    ) -> dict[str, Any]:
        """Run a command.

        Args:
            argv: Program and arguments, e.g. ["ls", "-la", "src"]; the program is looked up
                on PATH.
            cwd: Working directory relative to the workspace root.
            ctx: The call context (injected by toolq; not an argument).
            timeout: Seconds before the command is killed (at most the configured limit).

        """
        if self.allowed is not None and os.path.basename(argv[0]) not in self.allowed:
            raise ToolDeniedError(
                f"command {argv[0]!r} is not allowed; allowed: {', '.join(sorted(self.allowed))}",
                tool=self.name,
                reason="command_not_allowed",
            )
        result = self.sandbox.run(argv, ctx, cwd=self.directory(cwd), timeout=timeout)
        return result.model_dump()


class RunShellScript(SandboxTool):
    """Run a POSIX shell script with /bin/sh -c in the workspace; pipes and redirects work.

    Returns the exit code and output (streamed while it runs, capped); killed at its time
    limit.
    """

    name = "run_shell_script"

    def execute(
        self, script: str, ctx: ToolContext, cwd: str = ".", timeout: Timeout | None = None
    ) -> dict[str, Any]:
        """Run a shell script.

        Args:
            script: The script text, e.g. "ls *.py | wc -l".
            cwd: Working directory relative to the workspace root.
            ctx: The call context (injected by toolq; not an argument).
            timeout: Seconds before the script is killed (at most the configured limit).

        """
        result = self.sandbox.run(
            ["/bin/sh", "-c", script], ctx, cwd=self.directory(cwd), timeout=timeout
        )
        return result.model_dump()


def shell(
    root: str | os.PathLike[str],
    *,
    allow_shell: bool = False,
    limits: SandboxLimits | None = None,
    env: Mapping[str, str] | None = None,
    allowed_commands: Iterable[str] | None = None,
    network: bool = False,
    isolation: Isolation = "namespaces",
) -> list[Tool]:
    """``run_shell`` (DANGEROUS) in ``root``; with ``allow_shell`` also ``run_shell_script``.

    ``env`` adds variables to the child's allowlisted environment; ``allowed_commands``
    limits ``run_shell`` to those program names. ``network=True`` keeps the worker's network;
    ``isolation="none"`` runs without namespaces (see :mod:`toolq.builtins.sandbox`).
    """
    workspace = Workspace(root)
    sandbox = Sandbox(workspace.root, limits, env=env, network=network, isolation=isolation)
    allowed = frozenset(allowed_commands) if allowed_commands is not None else None
    tools: list[Tool] = [RunShell(workspace, sandbox, allowed)]
    if allow_shell:
        tools.append(RunShellScript(workspace, sandbox))
    return tools
