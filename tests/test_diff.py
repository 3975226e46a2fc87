from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolq.diff import (
    NO_NEWLINE_MARKER,
    DiffLine,
    DiffResult,
    DiffType,
    apply_json_patch,
    diff_json,
    diff_structured,
    diff_text,
)

SEED_OLD = "Hello\nWorld"
SEED_NEW = "Hello\nPython\nWorld"
TEN_LINES = "".join(f"line{i}\n" for i in range(1, 11))


# --- the seed's examples -----------------------------------------------------------------


def test_seed_unified_example() -> None:
    result = diff_text(SEED_OLD, SEED_NEW)

    assert result.diff_type is DiffType.UNIFIED
    assert result.diff_output == (
        "--- a/original\n+++ b/modified\n@@ -1,2 +1,3 @@\n Hello\n+Python\n World"
    )
    assert (result.additions, result.deletions, result.unchanged) == (1, 0, 2)
    assert result.change_summary == "+1 -0"
    assert result.similarity == pytest.approx(0.8)
    assert (result.old_content, result.new_content) == (SEED_OLD, SEED_NEW)


def test_seed_json_example() -> None:
    old = {"name": "Alice", "age": 30}
    new = {"name": "Alice", "age": 31, "city": "NYC"}

    result = diff_json(old, new)

    # jsonpatch emits the add before the replace; the seed lists them the other way round.
    patch = sorted(json.loads(result.diff_output), key=lambda op: op["path"])
    assert patch == [
        {"op": "replace", "path": "/age", "value": 31},
        {"op": "add", "path": "/city", "value": "NYC"},
    ]
    assert result.diff_type is DiffType.JSON_PATCH
    assert result.change_summary == "+2 -1"
    assert jsonpatch.apply_patch(old, json.loads(result.diff_output)) == new


def test_seed_structured_example() -> None:
    old = {"status": "draft", "title": "My Post"}
    new = {"status": "published", "title": "My Post"}

    result = diff_structured(old, new)

    assert result.diff_type is DiffType.STRUCTURED
    assert result.diff_output == "~ status: 'draft' -> 'published'"
    assert (result.additions, result.deletions, result.unchanged) == (1, 1, 1)
    assert result.similarity == 0.5
    assert result.changes == (
        DiffLine("remove", "status: 'draft'", None, None),
        DiffLine("add", "status: 'published'", None, None),
        DiffLine("equal", "title: 'My Post'", None, None),
    )


# --- no changes --------------------------------------------------------------------------


def _assert_unchanged(result: DiffResult) -> None:
    assert not result.has_changes
    assert result.similarity == 1.0
    assert result.change_summary == "no changes"
    assert (result.additions, result.deletions) == (0, 0)
    assert all(line.type == "equal" for line in result.changes)


@pytest.mark.parametrize("text", ["", "one line", "a\nb", "a\nb\n", "\n\n", TEN_LINES])
@pytest.mark.parametrize("diff_type", [DiffType.UNIFIED, DiffType.CONTEXT])
def test_identical_text_has_no_diff(text: str, diff_type: DiffType) -> None:
    result = diff_text(text, text, diff_type)

    _assert_unchanged(result)
    assert result.diff_output == ""


def test_identical_text_line_by_line_lists_every_line() -> None:
    result = diff_text("a\nb\n", "a\nb\n", DiffType.LINE_BY_LINE)

    _assert_unchanged(result)
    assert result.diff_output == "  a\n  b"
    assert result.unchanged == 2


@pytest.mark.parametrize("doc", [None, {}, [], {"a": [1, {"b": None}]}, [1, "x"]])
def test_identical_json_has_no_diff(doc: Any) -> None:
    result = diff_json(doc, doc)

    _assert_unchanged(result)
    assert json.loads(result.diff_output) == []


@pytest.mark.parametrize("doc", [{}, {"a": 1, "b": {"c": [1, 2]}}])
def test_identical_dicts_have_no_diff(doc: dict[str, Any]) -> None:
    result = diff_structured(doc, dict(doc))

    _assert_unchanged(result)
    assert result.diff_output == ""


# --- diff_text ---------------------------------------------------------------------------


def test_context_lines_limit_the_hunk() -> None:
    new = TEN_LINES.replace("line5\n", "FIVE\n")

    one = diff_text(TEN_LINES, new, context_lines=1)
    zero = diff_text(TEN_LINES, new, context_lines=0)
    default = diff_text(TEN_LINES, new)

    assert one.diff_output.splitlines()[2:] == [
        "@@ -4,3 +4,3 @@",
        " line4",
        "-line5",
        "+FIVE",
        " line6",
    ]
    assert zero.diff_output.splitlines()[2:] == ["@@ -5 +5 @@", "-line5", "+FIVE"]
    assert default.diff_output.splitlines()[2] == "@@ -2,7 +2,7 @@"
    # context only trims the rendering; changes still list every line
    assert len(one.changes) == len(zero.changes) == 11


def test_context_format() -> None:
    result = diff_text(SEED_OLD, SEED_NEW, DiffType.CONTEXT, fromfile="old.txt", tofile="new.txt")

    assert result.diff_type is DiffType.CONTEXT
    assert result.diff_output.splitlines() == [
        "*** old.txt",
        "--- new.txt",
        "***************",
        "*** 1,2 ****",
        "--- 1,3 ----",
        "  Hello",
        "+ Python",
        "  World",
    ]


def test_custom_file_names_in_unified_header() -> None:
    result = diff_text("a", "b", fromfile="before.py", tofile="after.py")

    assert result.diff_output.splitlines()[:2] == ["--- before.py", "+++ after.py"]


def test_line_by_line_format() -> None:
    result = diff_text("a\nb\nc", "a\nB\nc\nd", DiffType.LINE_BY_LINE)

    assert result.diff_output == "  a\n- b\n+ B\n  c\n+ d"
    assert result.change_summary == "+2 -1"


def test_line_numbers_for_insert_in_the_middle() -> None:
    result = diff_text("a\nb\nc\nd\n", "a\nb\nX\nY\nc\nd\n")

    assert result.changes == (
        DiffLine("equal", "a", 1, 1),
        DiffLine("equal", "b", 2, 2),
        DiffLine("add", "X", None, 3),
        DiffLine("add", "Y", None, 4),
        DiffLine("equal", "c", 3, 5),
        DiffLine("equal", "d", 4, 6),
    )
    assert (result.additions, result.deletions, result.unchanged) == (2, 0, 4)


def test_line_numbers_for_delete_at_the_end() -> None:
    result = diff_text("a\nb\nc\nd\n", "a\nb\n")

    assert result.changes == (
        DiffLine("equal", "a", 1, 1),
        DiffLine("equal", "b", 2, 2),
        DiffLine("remove", "c", 3, None),
        DiffLine("remove", "d", 4, None),
    )
    assert result.diff_output.splitlines()[2:] == ["@@ -1,4 +1,2 @@", " a", " b", "-c", "-d"]
    assert result.change_summary == "+0 -2"


def test_replace_lists_removals_before_additions() -> None:
    result = diff_text("a\nold\nz", "a\nnew\nz")

    assert result.changes[1:3] == (
        DiffLine("remove", "old", 2, None),
        DiffLine("add", "new", None, 2),
    )


def test_empty_to_text_and_back() -> None:
    added = diff_text("", "a\nb")
    removed = diff_text("a\nb", "")

    assert added.changes == (DiffLine("add", "a", None, 1), DiffLine("add", "b", None, 2))
    assert added.similarity == 0.0
    assert NO_NEWLINE_MARKER not in added.diff_output
    assert removed.change_summary == "+0 -2"


def test_missing_final_newline_on_both_sides_is_not_a_change() -> None:
    result = diff_text("a\nb", "a\nb\nc")

    assert NO_NEWLINE_MARKER not in result.diff_output
    assert [line.type for line in result.changes] == ["equal", "equal", "add"]


def test_missing_final_newline_on_one_side_is_marked() -> None:
    result = diff_text("a\nb", "a\nb\n")

    assert result.has_changes
    assert result.diff_output.splitlines()[2:] == [
        "@@ -1,2 +1,2 @@",
        " a",
        "-b",
        NO_NEWLINE_MARKER,
        "+b",
    ]
    line_by_line = diff_text("a\nb\n", "a\nb", DiffType.LINE_BY_LINE)
    assert line_by_line.diff_output == f"  a\n- b\n+ b\n{NO_NEWLINE_MARKER}"


def test_blank_lines_are_lines() -> None:
    result = diff_text("a\n\nb\n", "a\nb\n")

    assert result.changes == (
        DiffLine("equal", "a", 1, 1),
        DiffLine("remove", "", 2, None),
        DiffLine("equal", "b", 3, 2),
    )


@pytest.mark.parametrize(
    ("diff_type", "use"),
    [(DiffType.JSON_PATCH, "diff_json"), (DiffType.STRUCTURED, "diff_structured")],
)
def test_diff_text_rejects_non_text_formats(diff_type: DiffType, use: str) -> None:
    with pytest.raises(ValueError, match=use):
        diff_text("a", "b", diff_type)


def test_diff_text_rejects_unknown_format_and_negative_context() -> None:
    with pytest.raises(ValueError):
        diff_text("a", "b", "side_by_side")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context_lines"):
        diff_text("a", "b", context_lines=-1)


def test_diff_type_accepts_its_string_value() -> None:
    result = diff_text("a", "b", "line_by_line")  # type: ignore[arg-type]

    assert result.diff_type is DiffType.LINE_BY_LINE


def _lines(text: str) -> list[str]:
    return text.removesuffix("\n").split("\n") if text else []


line_lists = st.lists(st.sampled_from(["a", "b", "c", "", " d"]), max_size=12)


@given(old=line_lists, new=line_lists, old_eol=st.booleans(), new_eol=st.booleans())
def test_changes_rebuild_both_sides(
    old: list[str], new: list[str], old_eol: bool, new_eol: bool
) -> None:
    old_text = "\n".join(old) + ("\n" if old_eol and old else "")
    new_text = "\n".join(new) + ("\n" if new_eol and new else "")

    result = diff_text(old_text, new_text)

    old_side = [line for line in result.changes if line.type != "add"]
    new_side = [line for line in result.changes if line.type != "remove"]
    assert [line.content for line in old_side] == _lines(old_text)
    assert [line.content for line in new_side] == _lines(new_text)
    assert [line.line_number_old for line in old_side] == list(range(1, len(old_side) + 1))
    assert [line.line_number_new for line in new_side] == list(range(1, len(new_side) + 1))
    assert result.has_changes == (old_text != new_text)
    assert 0.0 <= result.similarity <= 1.0


# --- diff_json ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "ops", "summary"),
    [
        ({"a": 1}, {"a": 1, "b": 2}, ["add"], "+1 -0"),
        ({"a": 1, "b": 2}, {"a": 1}, ["remove"], "+0 -1"),
        ({"a": 1}, {"a": "one"}, ["replace"], "+1 -1"),
        ({"a": {"b": [1, 2]}}, {"a": {"b": [1, 2, 3]}}, ["add"], "+1 -0"),
        ([1, 2, 3], [1, 3], ["remove"], "+0 -1"),
        ([1, 2, 3], [3, 1, 2], ["move"], "+1 -1"),
        (None, {"a": 1}, ["replace"], "+1 -1"),
        ({"a": 1}, None, ["replace"], "+1 -1"),
        ({"a": 1}, [1], ["replace"], "+1 -1"),
    ],
)
def test_diff_json_ops_and_counts(old: Any, new: Any, ops: list[str], summary: str) -> None:
    result = diff_json(old, new)
    patch = json.loads(result.diff_output)

    assert [op["op"] for op in patch] == ops
    assert result.change_summary == summary
    assert jsonpatch.apply_patch(old, patch) == new
    assert apply_json_patch(old, result.diff_output) == new
    assert apply_json_patch(old, patch) == new


def test_diff_json_content_and_changes_are_pretty_lines() -> None:
    result = diff_json({"b": 1, "a": [1]}, {"a": [1], "b": 2})

    assert result.old_content == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}'
    assert result.new_content == '{\n  "a": [\n    1\n  ],\n  "b": 2\n}'
    assert [line for line in result.changes if line.type != "equal"] == [
        DiffLine("remove", '  "b": 1', 5, None),
        DiffLine("add", '  "b": 2', None, 5),
    ]
    assert result.unchanged == 5
    assert 0.0 < result.similarity < 1.0


def test_diff_json_treats_none_as_null() -> None:
    result = diff_json(None, {"a": 1})

    assert result.old_content == "null"
    assert json.loads(result.diff_output) == [{"op": "replace", "path": "", "value": {"a": 1}}]


def test_diff_json_does_not_touch_its_inputs() -> None:
    old = {"a": [1, 2]}
    new = {"a": [2]}

    result = diff_json(old, new)
    apply_json_patch(old, result.diff_output)

    assert old == {"a": [1, 2]}
    assert new == {"a": [2]}


# --- diff_structured ---------------------------------------------------------------------


def test_diff_structured_adds_removes_and_changes() -> None:
    old = {"name": "Alice", "age": 30, "status": "draft"}
    new = {"name": "Alice", "status": "published", "city": "NYC"}

    result = diff_structured(old, new)

    assert result.diff_output.splitlines() == [
        "- age: 30",
        "~ status: 'draft' -> 'published'",
        "+ city: 'NYC'",
    ]
    assert (result.additions, result.deletions, result.unchanged) == (2, 2, 1)
    assert result.similarity == pytest.approx(1 / 4)


def test_diff_structured_nested_keys_use_dotted_paths() -> None:
    old = {"user": {"name": "A", "address": {"city": "NYC", "zip": "1"}}}
    new = {"user": {"name": "A", "address": {"city": "LA", "zip": "1"}, "tags": ["x"]}}

    result = diff_structured(old, new)

    assert result.diff_output.splitlines() == [
        "~ user.address.city: 'NYC' -> 'LA'",
        "+ user.tags: ['x']",
    ]
    assert result.unchanged == 2
    assert result.similarity == pytest.approx(2 / 4)


def test_diff_structured_ignores_keys_at_any_depth() -> None:
    old = {"title": "T", "updated_at": 1, "meta": {"updated_at": 1, "rev": {"updated_at": 1}}}
    new = {"title": "T", "updated_at": 2, "meta": {"updated_at": 2, "rev": {"updated_at": 2}}}

    result = diff_structured(old, new, ignore_keys={"updated_at"})

    _assert_unchanged(result)
    assert result.changes == (DiffLine("equal", "title: 'T'", None, None),)
    assert diff_structured(old, new).change_summary == "+3 -3"


def test_diff_structured_ignored_key_hides_its_subtree() -> None:
    result = diff_structured({"secret": {"a": 1}}, {"secret": {"a": 2, "b": 3}}, {"secret"})

    assert not result.has_changes
    assert result.changes == ()


def test_diff_structured_value_becoming_a_dict() -> None:
    result = diff_structured({"a": 1, "b": {}}, {"a": {"x": 1}, "b": {"y": 2}})

    assert result.diff_output.splitlines() == ["- a: 1", "- b: {}", "+ a.x: 1", "+ b.y: 2"]


def test_diff_structured_type_change_is_a_change() -> None:
    result = diff_structured({"flag": 1, "n": 2}, {"flag": True, "n": 2.0})

    assert result.diff_output.splitlines() == ["~ flag: 1 -> True", "~ n: 2 -> 2.0"]


def test_diff_structured_dotted_key_does_not_collide_with_nesting() -> None:
    result = diff_structured({"a.b": 1}, {"a": {"b": 1}})

    assert result.change_summary == "+1 -1"


def test_diff_structured_content_is_json() -> None:
    result = diff_structured({"b": 1, "a": 2}, {"a": 2})

    assert result.old_content is not None
    assert json.loads(result.old_content) == {"a": 2, "b": 1}


# --- DiffResult --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        diff_text(SEED_OLD, SEED_NEW),
        diff_text(SEED_OLD, SEED_NEW, DiffType.LINE_BY_LINE),
        diff_json({"a": [1]}, {"a": [1, 2]}),
        diff_structured({"a": 1}, {"a": 2}),
        diff_text("same", "same"),
    ],
)
def test_to_dict_is_json_serializable(result: DiffResult) -> None:
    data = json.loads(json.dumps(result.to_dict()))

    assert data["diff_type"] == result.diff_type.value
    assert data["has_changes"] == result.has_changes
    assert data["change_summary"] == result.change_summary
    assert data["changes"] == [dataclasses.asdict(line) for line in result.changes]
    assert set(data) == {
        "diff_type",
        "diff_output",
        "changes",
        "additions",
        "deletions",
        "unchanged",
        "similarity",
        "old_content",
        "new_content",
        "has_changes",
        "change_summary",
    }


def test_to_dict_of_seed_example() -> None:
    data = diff_text(SEED_OLD, SEED_NEW).to_dict()

    assert data["diff_type"] == "unified"
    assert data["changes"][1] == {
        "type": "add",
        "content": "Python",
        "line_number_old": None,
        "line_number_new": 2,
    }
    assert (data["additions"], data["deletions"], data["unchanged"]) == (1, 0, 2)


def test_results_are_frozen() -> None:
    result = diff_text("a", "b")

    with pytest.raises(dataclasses.FrozenInstanceError):
        result.additions = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.changes[0].content = "x"  # type: ignore[misc]
