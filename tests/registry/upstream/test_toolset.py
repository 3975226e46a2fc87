"""An upstream MCP server's tools in a registry: schemas, risk, options, errors, refresh, pins.

Real servers (``tests/registry/upstream/server.py``, built on the mcp SDK) over stdio, started by
the toolset, and over Streamable HTTP; calls here run in this process (``registry.invoke``
through the executor), as a worker runs them.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.registry.upstream.conftest import HttpUpstream, records, stdio_command, wait_records
from toolq import CallStatus, RiskLevel
from toolq.errors import ConfigurationError
from toolq.execution.context import ToolContext
from toolq.registry.upstream import Manifest, McpTool
from toolq.registry.upstream.tool import tool_name

EXPECTED_RISK = {
    "read_note": RiskLevel.SAFE,  # readOnlyHint
    "append_note": RiskLevel.MODERATE,  # hints, neither read-only nor destructive
    "delete_note": RiskLevel.DANGEROUS,  # destructiveHint
    "mystery": RiskLevel.DANGEROUS,  # no annotations at all
}


def test_stdio_tools_appear_with_their_schemas_and_annotation_risk(
    record: Path, new_registry
) -> None:
    registry = new_registry()
    registry.mcp_server("notes", command=stdio_command(record))
    for upstream, risk in EXPECTED_RISK.items():
        tool = registry.require(f"notes_{upstream}")
        assert isinstance(tool, McpTool)
        assert tool.risk is risk, upstream
        assert tool.category == "notes" and "mcp" in tool.tags
    read = registry.require("notes_read_note")
    assert read.idempotent and not registry.require("notes_delete_note").idempotent
    assert read.description == "Read a note."
    assert read.input_schema["properties"] == {"name": {"type": "string"}}
    assert read.input_schema["required"] == ["name"]
    assert registry.require("notes_double").output_json_schema == {
        "type": "object",
        "properties": {"double": {"type": "integer"}},
        "required": ["double"],
    }
    [mcp] = [s for s in registry.schemas("mcp") if s["name"] == "notes_double"]
    assert mcp["outputSchema"]["properties"] == {"double": {"type": "integer"}}
    [openai] = [s for s in registry.schemas("openai") if s["function"]["name"] == "notes_mystery"]
    assert openai["function"]["parameters"]["properties"] == {"x": {"type": "integer"}}
    assert records(record) == []  # listing calls no tool


def test_http_tools_appear_the_same_way(http_upstream: HttpUpstream, new_registry) -> None:
    registry = new_registry()
    registry.mcp_server(
        "tickets", url=http_upstream.url, headers={"Authorization": "Bearer tok-lister-5b1d"}
    )
    for upstream, risk in EXPECTED_RISK.items():
        assert registry.require(f"tickets_{upstream}").risk is risk
    done = registry.invoke("tickets_whoami", {})
    assert done.status is CallStatus.SUCCEEDED and done.content[0].text == "lister"


def test_options_override_risk_approval_limits_cost_and_tags_per_tool_and_pattern(
    record: Path, new_registry
) -> None:
    registry = new_registry()
    registry.mcp_server(
        "notes",
        command=stdio_command(record),
        prefix="n__",
        tools={
            "*_note": {"risk": "moderate", "tags": ["notes"], "cost": 0.5},
            "delete_note": {"risk": "dangerous", "rate_limit": "5/m", "concurrency": 2},
            "read_*": {"requires_approval": True, "timeout": 7},
            "grow": {"enabled": False},
            "mystery": {"risk": "safe", "idempotent": True, "approval_timeout": 60},
        },
    )
    read, append, delete = (registry.require(f"n__{n}_note") for n in ("read", "append", "delete"))
    assert read.risk is RiskLevel.MODERATE and read.requires_approval is True
    assert read.timeout == 7 and read.tags == ("mcp", "notes", "notes") and read.cost == 0.5
    assert append.risk is RiskLevel.MODERATE and append.requires_approval is None
    assert delete.risk is RiskLevel.DANGEROUS and str(delete.rate_limit) == "5/60s"
    assert delete.concurrency == 2 and delete.cost == 0.5
    mystery = registry.require("n__mystery")
    assert mystery.risk is RiskLevel.SAFE and mystery.idempotent
    assert mystery.approval_timeout == 60
    assert "n__grow" not in registry
    assert registry.require("n__count").risk is RiskLevel.SAFE  # no option: its annotations


def test_tool_names_fit_every_provider() -> None:
    assert tool_name("fs_", "read.file/v2") == "fs_read_file_v2"
    long = tool_name("server_", "x" * 80)
    assert len(long) == 64 and long.startswith("server_xxx")
    assert long != tool_name("server_", "x" * 81)


def test_upstream_errors_are_failed_calls_the_model_can_read(record: Path, new_registry) -> None:
    registry = new_registry()
    registry.mcp_server("notes", command=stdio_command(record))
    failed = registry.invoke("notes_fail", {})
    assert failed.status is CallStatus.FAILED and failed.error_type == "upstream_error"
    assert "the note is locked" in (failed.error or "")
    rejected = registry.invoke("notes_reject", {})
    assert rejected.status is CallStatus.FAILED and rejected.error_type == "upstream_error"
    assert "not on a Sunday" in (rejected.error or "") and "-32001" in (rejected.error or "")
    from toolq.dispatch.providers import to_messages

    [message] = to_messages([failed], "openai")
    assert "the note is locked" in message["content"]
    wrong = registry.invoke("notes_mystery", {"x": "seven"})
    assert wrong.error_type == "invalid_arguments"
    assert [r["tool"] for r in records(record)] == ["fail", "reject"]  # bad arguments never sent


def test_structured_output_and_arguments_reach_the_server_as_given(
    record: Path, new_registry
) -> None:
    registry = new_registry()
    registry.mcp_server("notes", command=stdio_command(record))
    done = registry.invoke("notes_double", {"x": 21})
    assert done.status is CallStatus.SUCCEEDED and done.output == {"double": 42}
    # The schema has a default for "newline": the server applies it, toolq adds nothing.
    assert registry.require("notes_append_note").input_schema["properties"]["newline"] == {
        "type": "boolean",
        "default": False,
    }
    registry.invoke("notes_append_note", {"name": "todo", "text": ", eggs"})
    assert records(record, tool="append_note")[0]["arguments"] == {"name": "todo", "text": ", eggs"}


def test_progress_reaches_the_context(record: Path, new_registry) -> None:
    registry = new_registry()
    registry.mcp_server("notes", command=stdio_command(record))
    seen: list[dict] = []
    ctx = ToolContext(progress_sink=seen.append)
    done = registry.invoke("notes_count", {"steps": 3, "delay": 0.01}, context=ctx)
    assert done.status is CallStatus.SUCCEEDED
    assert seen == [
        {"progress": 1.0, "total": 3.0, "message": "step 1"},
        {"progress": 2.0, "total": 3.0, "message": "step 2"},
        {"progress": 3.0, "total": 3.0, "message": "step 3"},
    ]


def test_the_registry_follows_list_changed(record: Path, new_registry) -> None:
    registry = new_registry()
    registry.mcp_server("notes", command=stdio_command(record))
    assert "notes_extra" not in registry
    assert registry.invoke("notes_grow", {}).status is CallStatus.SUCCEEDED
    deadline = time.monotonic() + 10
    while "notes_extra" not in registry:
        assert time.monotonic() < deadline, "the new tool did not appear"
        time.sleep(0.05)
    assert registry.require("notes_extra").risk is RiskLevel.SAFE
    assert registry.invoke("notes_extra", {}).content[0].text == "extra"


def test_a_tool_added_since_the_last_listing_is_found_by_listing_again(
    http_upstream: HttpUpstream, new_registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``find`` lists again when asked for a name the server may have added (a worker
    that holds no session hears no ``list_changed``), at most once per interval."""
    from toolq.registry.upstream import toolset

    server = {"url": http_upstream.url, "headers": {"Authorization": "Bearer tok-lister-5b1d"}}
    worker = new_registry()
    worker.mcp_server("tickets", **server)
    other = new_registry()
    other.mcp_server("tickets", **server)
    monkeypatch.setattr(toolset, "RELIST_INTERVAL", 3600.0)
    assert worker.find("tickets_extra") is None  # listed again: nothing new yet
    assert other.invoke("tickets_grow", {}).status is CallStatus.SUCCEEDED
    assert worker.find("tickets_extra") is None  # within the interval: not listed again
    assert worker.find("echo_extra") is None  # not this server's prefix
    monkeypatch.setattr(toolset, "RELIST_INTERVAL", 0.0)
    found = worker.find("tickets_extra")
    assert found is not None and found.risk is RiskLevel.SAFE
    assert worker.invoke("tickets_extra", {}).content[0].text == "extra"
    assert worker.find("tickets_no_such_tool") is None


def test_a_server_that_cannot_be_listed_fails_the_registry_build(
    tmp_path: Path, new_registry
) -> None:
    registry = new_registry()
    missing = str(tmp_path / "no-such-server")
    with pytest.raises(ConfigurationError, match="cannot list the tools of MCP server 'gone'"):
        registry.mcp_server("gone", command=[missing], connect_timeout=5)
    crashing = [sys.executable, "-c", "raise SystemExit(3)"]
    with pytest.raises(ConfigurationError, match="exited with status 3"):
        registry.mcp_server("dies", command=crashing, connect_timeout=5)
    assert len(registry) == 0


def test_a_pinned_manifest_builds_without_the_server_and_refuses_changed_tools(
    record: Path, tmp_path: Path, new_registry
) -> None:
    live = new_registry()
    manifest = live.mcp_server("notes", command=stdio_command(record)).manifest()
    assert {t.name for t in manifest.tools} >= set(EXPECTED_RISK)
    # Pinned as it was, except that the pin says delete_note is read-only.
    pinned = manifest.model_copy(
        update={
            "tools": [
                t.model_copy(update={"annotations": {"readOnlyHint": True}})
                if t.name == "delete_note"
                else t
                for t in manifest.tools
            ]
        }
    )
    path = tmp_path / "notes.json"
    path.write_text(pinned.dump())
    offline = new_registry()
    offline.mcp_server("notes", command=[str(tmp_path / "nowhere")], manifest=path)
    assert offline.require("notes_delete_note").risk is RiskLevel.SAFE  # as pinned
    registry = new_registry()
    registry.mcp_server("notes", command=stdio_command(record), manifest=path)
    refused = registry.invoke("notes_delete_note", {"name": "todo"})
    assert refused.status is CallStatus.FAILED and refused.error_type == "upstream_changed"
    assert "describes it otherwise" in (refused.error or "")
    assert registry.invoke("notes_read_note", {"name": "todo"}).status is CallStatus.SUCCEEDED
    assert records(record, tool="delete_note") == []
    assert Manifest.load(path, "notes").server == "notes"
    with pytest.raises(ConfigurationError, match="lists the tools of 'notes'"):
        Manifest.load(path, "other")


def test_a_stdio_server_gets_no_environment_but_its_own(
    record: Path, monkeypatch, new_registry
) -> None:
    monkeypatch.setenv("TOOLQ_SECRETS_KEY", "not-for-servers")
    registry = new_registry()
    registry.mcp_server("notes", command=stdio_command(record), env={"NOTES_TOKEN": "x"})
    names = json.loads(registry.invoke("notes_environ", {}).content[0].text)
    assert "NOTES_TOKEN" in names and "TOOLQ_SECRETS_KEY" not in names
    assert set(names) <= {"NOTES_TOKEN", "PATH", "HOME", "LANG", "LC_CTYPE"}


def test_progress_and_cancel_over_streamable_http(
    http_upstream: HttpUpstream, new_registry
) -> None:
    registry = new_registry()
    toolset = registry.mcp_server(
        "tickets", url=http_upstream.url, headers={"Authorization": "Bearer tok-lister-5b1d"}
    )
    seen: list[dict] = []
    ctx = ToolContext(progress_sink=seen.append)
    outcome: list = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            registry.invoke("tickets_count", {"steps": 400, "delay": 0.05}, context=ctx)
        )
    )
    try:
        worker.start()
        deadline = time.monotonic() + 20
        while len(seen) < 2:
            assert time.monotonic() < deadline, "no progress arrived"
            time.sleep(0.02)
        ctx.cancel()
        worker.join(20)
        [result] = outcome
        assert result.status is CallStatus.CANCELLED
        assert seen[:2] == [
            {"progress": 1.0, "total": 400.0, "message": "step 1"},
            {"progress": 2.0, "total": 400.0, "message": "step 2"},
        ]
        wait_records(http_upstream.record, tool="count", event="cancelled")
    finally:
        toolset.close()
