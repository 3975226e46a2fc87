"""A stdio upstream server in toolq's sandbox, as the shell tools run: confined, not trusted.

It runs as the sandbox user in namespaces of its own, sees only the environment it is
given, and a server the sandbox cannot start fails with the sandbox's reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import mcp
import pytest

from tests.registry.upstream.conftest import SERVER, records
from toolq import CallStatus, ToolRegistry
from toolq.builtins import Sandbox
from toolq.builtins.sandbox import DEFAULT_PATH
from toolq.errors import ConfigurationError

SITE = str(Path(mcp.__file__).resolve().parent.parent)
"""Where the mcp SDK is installed; the sandboxed server imports it from there."""


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A directory the sandbox user can write (the server's record goes there)."""
    root = Path(tempfile.mkdtemp(prefix="toolq-mcp-ws-", dir="/tmp"))
    root.chmod(0o777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def readable_by_anyone(path: str) -> bool:
    real = Path(os.path.realpath(path))
    return bool(real.stat().st_mode & 0o004) and all(p.stat().st_mode & 0o001 for p in real.parents)


def interpreter(sandbox: Sandbox) -> str:
    """A Python the sandbox user can run that imports the mcp SDK from ``SITE``."""
    if not (readable_by_anyone(SERVER) and readable_by_anyone(SITE)):
        pytest.skip("the test server or the mcp SDK is not readable by the sandbox user")
    for candidate in (
        os.path.realpath(sys.executable),
        shutil.which("python3", path=DEFAULT_PATH),
    ):
        if candidate and sandbox.usable(candidate):
            probe = subprocess.run(
                [candidate, "-c", "import mcp.server.lowlevel"],
                env={"PYTHONPATH": SITE, "PATH": DEFAULT_PATH},
                capture_output=True,
                timeout=60,
            )
            if probe.returncode == 0:
                return candidate
    pytest.skip("no Python usable by the sandbox user imports the mcp SDK here")


def test_a_sandboxed_server_runs_as_the_sandbox_user_in_its_own_namespaces(
    workspace: Path,
) -> None:
    sandbox = Sandbox(str(workspace))
    record = workspace / "calls.jsonl"
    registry = ToolRegistry()
    toolset = registry.mcp_server(
        "boxed",
        command=[interpreter(sandbox), SERVER, "--record", str(record)],
        env={"PYTHONPATH": SITE},
        sandbox=sandbox,
    )
    try:
        registry.require("boxed_read_note").check_runtime()  # the worker's start-up check
        done = registry.invoke("boxed_read_note", {"name": "todo"})
        assert done.status is CallStatus.SUCCEEDED and done.content[0].text == "buy milk"
        names = json.loads(registry.invoke("boxed_environ", {}).content[0].text)
    finally:
        toolset.close()
    assert set(names) <= {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONPATH", "LC_CTYPE"}
    [received] = records(record, tool="read_note")
    assert received["pid"] <= 3  # pid 1 is the namespace's init: a PID namespace of its own
    if os.geteuid() == 0:
        assert received["uid"] == sandbox.limits.user


def test_a_server_the_sandbox_cannot_start_fails_with_the_sandboxs_reason(
    workspace: Path, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    script = private / "server.py"
    script.write_text("print('never')\n")
    sandbox = Sandbox(str(workspace))
    if not sandbox.drop_privileges:
        pytest.skip("only a root worker runs the server as another user")
    with pytest.raises(ConfigurationError, match="could not start in the sandbox"):
        ToolRegistry().mcp_server(
            "locked", command=[str(script)], sandbox=sandbox, connect_timeout=10
        )
