"""``TOOLQ_MCP_SERVERS`` in the CLI: upstream tools without an app, and pinning them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.registry.upstream.conftest import stdio_command


def toolq(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-m", "toolq", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=ROOT,
        timeout=120,
    )


# Four `toolq` processes, two of them starting the stdio server: on two loaded cores (the
# suite running twice beside other jobs) they took more than the suite's 120 s in all.
@pytest.mark.timeout(300)
def test_upstream_tools_without_an_app_and_a_pinned_manifest(tmp_path: Path) -> None:
    servers = [{"name": "notes", "command": stdio_command(tmp_path / "calls.jsonl")}]
    listed = toolq("tools", "--format", "mcp", TOOLQ_MCP_SERVERS=json.dumps(servers))
    assert listed.returncode == 0, listed.stderr
    names = {tool["name"] for tool in json.loads(listed.stdout)}
    assert {"notes_read_note", "notes_delete_note"} <= names

    pinned = toolq("tools", "--manifest", "notes", TOOLQ_MCP_SERVERS=json.dumps(servers))
    assert pinned.returncode == 0, pinned.stderr
    manifest = tmp_path / "notes.json"
    manifest.write_text(pinned.stdout)
    assert json.loads(pinned.stdout)["server"] == "notes"

    offline = [{"name": "notes", "command": [str(tmp_path / "absent")], "manifest": str(manifest)}]
    listed = toolq("tools", "--format", "anthropic", TOOLQ_MCP_SERVERS=json.dumps(offline))
    assert listed.returncode == 0, listed.stderr
    assert {t["name"] for t in json.loads(listed.stdout)} == names

    unknown = toolq("tools", "--manifest", "tickets", TOOLQ_MCP_SERVERS=json.dumps(servers))
    assert unknown.returncode == 1 and "no MCP server named 'tickets'" in unknown.stderr


def test_a_server_that_cannot_be_listed_stops_the_command_with_its_name(tmp_path: Path) -> None:
    servers = [{"name": "gone", "command": [str(tmp_path / "absent")], "connect_timeout": 5}]
    failed = toolq("tools", TOOLQ_MCP_SERVERS=json.dumps(servers))
    assert failed.returncode == 2
    assert "cannot list the tools of MCP server 'gone'" in failed.stderr
    assert "Traceback" not in failed.stderr
