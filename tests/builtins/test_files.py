"""files(): the workspace jail, reads with ranges and caps, edits with preview and undo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolq import CallStatus, ToolRegistry
from toolq.builtins import files
from toolq.builtins.workspace import Workspace
from toolq.errors import ToolDeniedError
from toolq.workers.runtime import diff_of


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("top secret\n")
    return secret


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    (path / "notes.txt").write_text("one\ntwo\nthree\n")
    return path


@pytest.fixture
def registry(root: Path) -> ToolRegistry:
    reg = ToolRegistry()
    reg.include(files(root=root, max_read_bytes=64, max_file_bytes=4096))
    return reg


def test_tool_names_and_risks(registry: ToolRegistry) -> None:
    risks = {t.name: t.risk.value for t in registry}
    assert risks == {
        "read_file": "safe",
        "write_file": "moderate",
        "append_file": "moderate",
        "insert_lines": "moderate",
    }
    assert all(
        registry[n].has_preview and registry[n].has_undo
        for n in ("write_file", "append_file", "insert_lines")
    )


def test_read_whole_file_and_line_range(registry: ToolRegistry) -> None:
    whole = registry.invoke("read_file", {"path": "notes.txt"}).output
    assert whole["content"] == "one\ntwo\nthree\n" and whole["end_line"] == 3
    part = registry.invoke("read_file", {"path": "notes.txt", "start_line": 2, "end_line": 2})
    assert part.output["content"] == "two\n"
    assert (part.output["start_line"], part.output["end_line"]) == (2, 2)
    past = registry.invoke("read_file", {"path": "notes.txt", "start_line": 9})
    assert past.status is CallStatus.FAILED and "past the end" in (past.error or "")


def test_read_is_capped(registry: ToolRegistry, root: Path) -> None:
    (root / "big.txt").write_text("x" * 50 + "\n" + "y" * 50 + "\n")
    out = registry.invoke("read_file", {"path": "big.txt"}).output
    assert out["truncated"] is True and len(out["content"]) == 64


def _refusals(registry: ToolRegistry, path: str) -> list[str]:
    errors = []
    for name, args in [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "pwned\n"}),
        ("append_file", {"path": path, "content": "pwned\n"}),
        ("insert_lines", {"path": path, "line": 1, "text": "pwned"}),
    ]:
        result = registry.invoke(name, args)
        assert result.status is CallStatus.FAILED, (name, path, result)
        assert result.error_type == ToolDeniedError.code, (name, path, result.error)
        errors.append(result.error or "")
    return errors


def test_traversal_and_absolute_escapes_are_refused(registry, root, outside) -> None:
    rel = os.path.relpath(outside, root)
    for path in (
        rel,
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        str(outside),
        "/etc/passwd",
    ):
        for error in _refusals(registry, path):
            assert repr(path) in error
    assert outside.read_text() == "top secret\n"
    assert sorted(p.name for p in outside.parent.iterdir()) == ["secret.txt"]


def test_sibling_prefix_is_not_inside(tmp_path: Path) -> None:
    root = tmp_path / "work"
    evil = tmp_path / "work-evil"
    root.mkdir()
    evil.mkdir()
    (evil / "x.txt").write_text("evil\n")
    reg = ToolRegistry()
    reg.include(files(root=root))
    _refusals(reg, str(evil / "x.txt"))
    assert (evil / "x.txt").read_text() == "evil\n"


def test_symlink_escapes_are_refused(registry, root, outside) -> None:
    (root / "link.txt").symlink_to(outside)  # final component
    (root / "linkdir").symlink_to(outside.parent)  # parent directory
    (root / "chain").symlink_to(root / "linkdir")  # a link to a link that leaves
    for path in ("link.txt", "linkdir/secret.txt", "linkdir/new.txt", "chain/secret.txt"):
        _refusals(registry, path)
    assert outside.read_text() == "top secret\n"
    assert not (outside.parent / "new.txt").exists()
    assert os.readlink(root / "link.txt") == str(outside)


def test_symlinks_inside_the_root_are_followed(registry, root) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "inner.txt").write_text("inner\n")
    (root / "alias").symlink_to(root / "sub")
    (root / "alias.txt").symlink_to("sub/inner.txt")
    assert registry.invoke("read_file", {"path": "alias/inner.txt"}).output["content"] == "inner\n"
    out = registry.invoke("write_file", {"path": "alias.txt", "content": "changed\n"}).output
    assert out["path"] == "sub/inner.txt"
    assert (root / "sub" / "inner.txt").read_text() == "changed\n"


def test_swapped_parent_directory_is_caught_by_the_descriptor_walk(root, outside) -> None:
    workspace = Workspace(root)
    (root / "d").mkdir()
    parts = workspace.resolve("d/file.txt")  # checked while d is a real directory
    (root / "d").rmdir()
    (root / "d").symlink_to(outside.parent)  # ... then swapped for a link out
    with pytest.raises(ToolDeniedError, match="'d'"):
        workspace.open_parent(parts)


def test_hard_link_is_replaced_not_written_through(registry, root, outside) -> None:
    os.link(outside, root / "hard.txt")
    registry.invoke("write_file", {"path": "hard.txt", "content": "new\n"})
    assert outside.read_text() == "top secret\n"
    assert (root / "hard.txt").read_text() == "new\n"


def test_write_append_insert_and_previews(registry, root) -> None:
    tool = registry["insert_lines"]
    preview = tool.preview(path="notes.txt", line=2, text="one and a half")
    assert preview == {
        "path": "notes.txt",
        "before": "one\ntwo\nthree\n",
        "after": "one\none and a half\ntwo\nthree\n",
    }
    diff = diff_of(preview)
    assert diff is not None and "+one and a half" in diff["diff_output"]
    assert (root / "notes.txt").read_text() == "one\ntwo\nthree\n"  # preview changed nothing
    assert registry.invoke(
        "insert_lines", {"path": "notes.txt", "line": 2, "text": "one and a half"}
    ).ok
    assert registry.invoke("append_file", {"path": "notes.txt", "content": "four\n"}).ok
    assert registry.invoke("insert_lines", {"path": "notes.txt", "line": 6, "text": "five"}).ok
    assert (root / "notes.txt").read_text() == "one\none and a half\ntwo\nthree\nfour\nfive\n"
    bad = registry.invoke("insert_lines", {"path": "notes.txt", "line": 99, "text": "x"})
    assert bad.status is CallStatus.FAILED and "past the end" in (bad.error or "")
    created = registry["write_file"].preview(path="new/file.txt", content="hi\n")
    assert created == {"path": "new/file.txt", "before": None, "after": "hi\n"}


def test_undo_restores_and_removes(registry, root) -> None:
    edit = registry.invoke("write_file", {"path": "notes.txt", "content": "replaced\n"})
    assert (root / "notes.txt").read_text() == "replaced\n"
    registry["write_file"].undo(edit.undo)
    assert (root / "notes.txt").read_text() == "one\ntwo\nthree\n"

    made = registry.invoke("write_file", {"path": "a/b/c.txt", "content": "new\n"})
    assert made.output["created"] is True
    registry["write_file"].undo(made.undo)
    assert not (root / "a").exists()


def test_undo_refuses_over_newer_content(registry, root) -> None:
    from toolq.errors import UndoError

    edit = registry.invoke("append_file", {"path": "notes.txt", "content": "four\n"})
    (root / "notes.txt").write_text("someone else\n")
    with pytest.raises(UndoError, match="changed after the call"):
        registry["append_file"].undo(edit.undo)
    assert (root / "notes.txt").read_text() == "someone else\n"


def test_edits_refuse_non_files_and_oversize(registry, root) -> None:
    (root / "dir").mkdir()
    assert (
        registry.invoke("write_file", {"path": "dir", "content": "x"}).status is CallStatus.FAILED
    )
    assert registry.invoke("write_file", {"path": ".", "content": "x"}).status is CallStatus.FAILED
    big = registry.invoke("write_file", {"path": "big.txt", "content": "x" * 5000})
    assert big.status is CallStatus.FAILED and "4096" in (big.error or "")
    assert not (root / "big.txt").exists()
    assert sorted(p.name for p in root.iterdir()) == ["dir", "notes.txt"]  # no temp files left
