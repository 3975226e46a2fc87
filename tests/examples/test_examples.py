"""Each example, run unattended against real workers."""

from __future__ import annotations

import json

import pytest

from tests.examples.conftest import Runner

pytestmark = pytest.mark.e2e


def test_undoable_edit(run_example: Runner, capsys: pytest.CaptureFixture[str]) -> None:
    code, module = run_example("undoable_edit")
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(module.documents_file().read_text()) == {"doc-1": "first draft"}  # undone
    assert '"error": "unknown tool \'launch_rockets\'"' in out
    assert "+second draft" in out and "-first draft" in out  # the approver's diff
    assert "call.undone" in out
    assert "edit_document in behavior 'chat': denied" in out


def test_preview_and_validate(run_example: Runner, capsys: pytest.CaptureFixture[str]) -> None:
    code, module = run_example("preview_and_validate")
    out = capsys.readouterr().out
    assert code == 0, out
    notes = module.example_dir("preview_and_validate") / "notes.txt"
    assert notes.read_text() == "the dog sat on the mat\nthe dog slept\n"
    assert '"occurrences": 2' in out and "+the dog sat on the mat" in out
    assert "ts_rfc2822: failed" in out
    assert (
        "fetch ftp://example.com: failed: invalid arguments for 'custom.fetch': URL must use" in out
    )
    assert "hello from a local http.server" in out


def test_search_and_chains(run_example: Runner, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_example("search_and_chains")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "on a worker: math.sqrt -> 4.0 in" in out
    assert "step 1 ('render'): no such tool in the registry" in out
    assert '"parsed": "CONTENT FOR HTTPS://EXAMPLE.COM"' in out
    assert "invalid input: failed: invalid arguments for 'math.sqrt'" in out


def test_hooks_and_retries(run_example: Runner, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_example("hooks_and_retries")
    out = capsys.readouterr().out
    assert code == 0, out
    assert (
        "hooks: global_pre -> tool_pre -> execute -> tool_post -> global_post -> monitoring" in out
    )
    assert "read_file missing.txt: succeeded: 'File not found. Please check the path.'" in out
    assert "after 3 attempts (2 retries)" in out
    assert "slow_report: failed (timeout)" in out
    assert '"warning": "This will execute a shell command"' in out
    assert "shell in the restored run -> 'restored\\n'" in out


def test_categories_and_builtins(run_example: Runner, capsys: pytest.CaptureFixture[str]) -> None:
    code, module = run_example("categories_and_builtins")
    out = capsys.readouterr().out
    assert code == 0, out
    assert (module.WORKSPACE / "data.csv").read_text() == "a,b\n1,2\n3,4\n5,6\n"
    assert "analyze_data while disabled: denied: tool 'analyze_data' is disabled" in out
    assert "progress: Progress: 60%" in out
    assert '"stdout": "rows: 3 sum of b: 12\\n"' in out
    assert module.registry.categories()["data_science"].enabled  # restored


def test_mcp_gateway(run_example: Runner, capsys: pytest.CaptureFixture[str]) -> None:
    code, module = run_example("mcp_gateway")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "files_read_file          safe" in out
    assert "tickets_close_ticket     dangerous" in out
    assert "files_write_file         moderate" in out
    assert "search progress events: ['searched ideas.md', 'searched plan.md']" in out
    assert "approver sees: tickets_close_ticket {'id': 1, 'reason': 'fixed'}" in out
    assert "call_1: Denied: denied by alice: keep the plan; archive it instead" in out
    tickets = json.loads(module.tickets_db().read_text())
    assert [(t["id"], t["status"]) for t in tickets] == [(1, "closed"), (2, "open"), (3, "open")]
    assert (module.files_root() / "plan.md").exists()
