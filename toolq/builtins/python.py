"""``run_python``: run a Python snippet in the sandbox (see :mod:`toolq.builtins.sandbox`).

The code is written to ``main.py`` in the call's private scratch directory and run with
``python -I -u`` (isolated: no user site, no ``PYTHON*`` variables, unbuffered output that
streams as progress). When the worker is root and drops privileges, the interpreter must be
usable by the sandbox user: the default picks the first of ``sys.executable`` and
``python3`` on the sandbox ``PATH`` that is world-executable.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from toolq.builtins.sandbox import (
    DEFAULT_PATH,
    Isolation,
    Sandbox,
    SandboxLimits,
    SandboxTool,
    Timeout,
)
from toolq.builtins.workspace import Workspace
from toolq.errors import ConfigurationError
from toolq.execution.context import ToolContext
from toolq.registry.tool import Tool

MAX_CODE_CHARS = 1_000_000


class RunPython(SandboxTool):
    """Run Python 3 code in the workspace and return its exit code and output.

    Print what you need to see: only stdout and stderr come back (streamed while it runs,
    capped). The working directory is the workspace root (or ``cwd``); the run is killed at
    its time limit.
    """

    name = "run_python"
    tags = ("python", "shell")

    def __init__(self, workspace: Workspace, sandbox: Sandbox, executable: str) -> None:
        self.executable = executable
        super().__init__(workspace, sandbox)

    def execute(
        self,
        code: Annotated[str, Field(max_length=MAX_CODE_CHARS)],
        ctx: ToolContext,
        args: list[str] | None = None,
        cwd: str = ".",
        timeout: Timeout | None = None,
    ) -> dict[str, Any]:
        """Run Python code.

        Args:
            code: A complete Python program, e.g. "print(sum(range(10)))".
            args: Command-line arguments, available as sys.argv[1:].
            cwd: Working directory relative to the workspace root.
            ctx: The call context (injected by toolq; not an argument).
            timeout: Seconds before the program is killed (at most the configured limit).

        """
        argv = [self.executable, "-I", "-u", "{scratch}/main.py", *(args or [])]
        result = self.sandbox.run(
            argv, ctx, cwd=self.directory(cwd), timeout=timeout, files={"main.py": code}
        )
        return result.model_dump()


def _interpreter(sandbox: Sandbox) -> str:
    candidates = [sys.executable, shutil.which("python3", path=DEFAULT_PATH)]
    for candidate in candidates:
        if candidate and sandbox.usable(candidate):
            return candidate
    raise ConfigurationError(
        f"no Python interpreter usable by sandbox uid {sandbox.limits.user} "
        f"(tried {', '.join(c for c in candidates if c)}); pass executable="
    )


def python(
    root: str | os.PathLike[str],
    *,
    limits: SandboxLimits | None = None,
    env: Mapping[str, str] | None = None,
    executable: str | None = None,
    network: bool = False,
    isolation: Isolation = "namespaces",
) -> list[Tool]:
    """``run_python`` (DANGEROUS) with ``root`` as its working directory.

    ``network=True`` keeps the worker's network; ``isolation="none"`` runs without namespaces
    (see :mod:`toolq.builtins.sandbox`).
    """
    workspace = Workspace(root)
    sandbox = Sandbox(workspace.root, limits, env=env, network=network, isolation=isolation)
    return [RunPython(workspace, sandbox, executable or _interpreter(sandbox))]
