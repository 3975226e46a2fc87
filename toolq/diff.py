"""Diffs between texts, JSON documents and dicts, for showing changes and supporting undo.

Every diff returns a :class:`DiffResult`. ``changes`` lists every compared line (or key),
equal ones included; ``diff_output`` is the rendered diff in the requested :class:`DiffType`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Literal

import jsonpatch

__all__ = [
    "NO_NEWLINE_MARKER",
    "ChangeType",
    "DiffLine",
    "DiffResult",
    "DiffType",
    "JsonDocument",
    "apply_json_patch",
    "diff_json",
    "diff_structured",
    "diff_text",
]

ChangeType = Literal["equal", "add", "remove"]
JsonDocument = dict[str, Any] | list[Any] | None

NO_NEWLINE_MARKER = "\\ No newline at end of file"
_LINE_PREFIXES: dict[ChangeType, str] = {"equal": "  ", "add": "+ ", "remove": "- "}


class DiffType(StrEnum):
    """The format of a diff's ``diff_output``."""

    UNIFIED = "unified"
    CONTEXT = "context"
    JSON_PATCH = "json_patch"
    LINE_BY_LINE = "line_by_line"
    STRUCTURED = "structured"


@dataclass(frozen=True)
class DiffLine:
    """One line of a text diff, or one key of a structured diff.

    Line numbers are 1-based; a side the line is absent from has ``None``.
    """

    type: ChangeType
    content: str
    line_number_old: int | None
    line_number_new: int | None


@dataclass(frozen=True)
class DiffResult:
    """The rendered diff, every compared line or key, and counts over them."""

    diff_type: DiffType
    diff_output: str
    changes: tuple[DiffLine, ...]
    additions: int
    deletions: int
    unchanged: int
    similarity: float
    old_content: str | None
    new_content: str | None

    @property
    def has_changes(self) -> bool:
        """Whether anything was added or removed."""
        return self.additions > 0 or self.deletions > 0

    @property
    def change_summary(self) -> str:
        """``"+<additions> -<deletions>"``, or ``"no changes"``."""
        if not self.has_changes:
            return "no changes"
        return f"+{self.additions} -{self.deletions}"

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able form, with ``has_changes`` and ``change_summary`` included."""
        return {
            "diff_type": self.diff_type.value,
            "diff_output": self.diff_output,
            "changes": [asdict(line) for line in self.changes],
            "additions": self.additions,
            "deletions": self.deletions,
            "unchanged": self.unchanged,
            "similarity": self.similarity,
            "old_content": self.old_content,
            "new_content": self.new_content,
            "has_changes": self.has_changes,
            "change_summary": self.change_summary,
        }


def diff_text(
    old: str,
    new: str,
    diff_type: DiffType = DiffType.UNIFIED,
    context_lines: int = 3,
    fromfile: str = "a/original",
    tofile: str = "b/modified",
) -> DiffResult:
    r"""Diff two texts line by line.

    Lines are split on ``\n`` only. ``UNIFIED`` and ``CONTEXT`` render like ``diff -u`` and
    ``diff -c`` with ``context_lines`` of context; ``LINE_BY_LINE`` lists every line as
    ``"  line"``, ``"+ line"`` or ``"- line"``. A missing newline at the end matters only when
    exactly one side lacks it: that side's last line then differs, marked as by ``git diff``.
    ``similarity`` is the :class:`difflib.SequenceMatcher` ratio over lines.

    Raises:
        ValueError: for ``JSON_PATCH`` or ``STRUCTURED`` (use :func:`diff_json` or
            :func:`diff_structured`), an unknown ``diff_type``, or negative ``context_lines``.

    """
    diff_type = DiffType(diff_type)
    if diff_type in (DiffType.JSON_PATCH, DiffType.STRUCTURED):
        raise ValueError(
            f"diff_text does not render {diff_type.value!r}; "
            "use diff_json for JSON_PATCH or diff_structured for STRUCTURED"
        )
    if context_lines < 0:
        raise ValueError(f"context_lines must be >= 0, got {context_lines}")

    old_lines, new_lines = _line_tokens(old, new)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines)
    paired = _line_changes(old_lines, new_lines, matcher)
    if diff_type is DiffType.UNIFIED:
        rendered: Iterable[str] = difflib.unified_diff(
            old_lines, new_lines, fromfile, tofile, n=context_lines, lineterm="\n"
        )
    elif diff_type is DiffType.CONTEXT:
        rendered = difflib.context_diff(
            old_lines, new_lines, fromfile, tofile, n=context_lines, lineterm="\n"
        )
    else:
        rendered = (_LINE_PREFIXES[line.type] + source for line, source in paired)
    changes = tuple(line for line, _ in paired)
    return _counted(diff_type, "\n".join(_marked(rendered)), changes, matcher.ratio(), old, new)


def diff_json(old: JsonDocument, new: JsonDocument) -> DiffResult:
    """Diff two JSON documents as an RFC 6902 patch.

    ``None`` is the JSON document ``null``, so the patch always takes ``old`` to ``new``.
    ``diff_output`` is the patch as indented JSON. ``additions`` and ``deletions`` count
    patch operations: ``add``/``copy`` add, ``remove`` deletes, ``replace``/``move`` do one
    of each. ``changes``, ``unchanged`` and ``similarity`` come from a line diff of the
    documents pretty-printed with sorted keys (``old_content``/``new_content``), so a UI
    can show them like a text diff.
    """
    patch: list[dict[str, Any]] = jsonpatch.make_patch(old, new).patch
    old_content = json.dumps(old, indent=2, sort_keys=True)
    new_content = json.dumps(new, indent=2, sort_keys=True)
    old_lines, new_lines = _line_tokens(old_content, new_content)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines)
    changes = tuple(line for line, _ in _line_changes(old_lines, new_lines, matcher))
    return DiffResult(
        diff_type=DiffType.JSON_PATCH,
        diff_output=json.dumps(patch, indent=2),
        changes=changes,
        additions=sum(op["op"] in ("add", "copy", "replace", "move") for op in patch),
        deletions=sum(op["op"] in ("remove", "replace", "move") for op in patch),
        unchanged=sum(line.type == "equal" for line in changes),
        similarity=matcher.ratio(),
        old_content=old_content,
        new_content=new_content,
    )


def apply_json_patch(doc: Any, patch: Sequence[Mapping[str, Any]] | str) -> Any:
    """Return a copy of ``doc`` with an RFC 6902 patch, or a ``diff_json`` output, applied."""
    return jsonpatch.apply_patch(doc, patch)


def diff_structured(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    ignore_keys: set[str] | None = None,
) -> DiffResult:
    """Diff two dicts key by key, nested dicts included under dotted paths (``"a.b"``).

    Keys named in ``ignore_keys`` are skipped at any depth, with everything under them.
    Other values are compared whole (lists included); a value that changes type changes.
    ``diff_output`` lists changed keys as ``~ key: old -> new``, ``+ key: new`` and
    ``- key: old``. ``changes`` has one line per key and none of them carry line numbers;
    a changed key is one deletion and one addition. ``similarity`` is the share of keys
    that are unchanged.
    """
    ignored = frozenset(ignore_keys or ())
    old_flat = _flatten(old, ignored)
    new_flat = _flatten(new, ignored)

    changes: list[DiffLine] = []
    output: list[str] = []
    for path, old_value in old_flat.items():
        name = ".".join(str(key) for key in path)
        if path not in new_flat:
            changes.append(DiffLine("remove", f"{name}: {old_value!r}", None, None))
            output.append(f"- {name}: {old_value!r}")
            continue
        new_value = new_flat[path]
        # 1 == True == 1.0 in Python, but a changed type is a change to whoever reads the data.
        if type(old_value) is type(new_value) and old_value == new_value:
            changes.append(DiffLine("equal", f"{name}: {old_value!r}", None, None))
            continue
        changes.append(DiffLine("remove", f"{name}: {old_value!r}", None, None))
        changes.append(DiffLine("add", f"{name}: {new_value!r}", None, None))
        output.append(f"~ {name}: {old_value!r} -> {new_value!r}")
    for path, new_value in new_flat.items():
        if path not in old_flat:
            name = ".".join(str(key) for key in path)
            changes.append(DiffLine("add", f"{name}: {new_value!r}", None, None))
            output.append(f"+ {name}: {new_value!r}")

    unchanged = sum(line.type == "equal" for line in changes)
    total = len(old_flat.keys() | new_flat.keys())
    return _counted(
        DiffType.STRUCTURED,
        "\n".join(output),
        tuple(changes),
        unchanged / total if total else 1.0,
        json.dumps(old, indent=2, sort_keys=True, default=repr),
        json.dumps(new, indent=2, sort_keys=True, default=repr),
    )


def _line_tokens(old: str, new: str) -> tuple[list[str], list[str]]:
    r"""Split both texts into lines ending in ``\n``, the last one unless only it lacks one."""
    old_lines = _terminated_lines(old)
    new_lines = _terminated_lines(new)
    # A missing final newline counts only when the other side has one (the last lines then
    # differ, as in git), so "Hello\nWorld" diffs as cleanly as "Hello\nWorld\n".
    if old and new and old.endswith("\n") != new.endswith("\n"):
        open_lines = new_lines if old.endswith("\n") else old_lines
        open_lines[-1] = open_lines[-1].removesuffix("\n")
    return old_lines, new_lines


def _terminated_lines(text: str) -> list[str]:
    return [line + "\n" for line in text.removesuffix("\n").split("\n")] if text else []


def _line_changes(
    old_lines: Sequence[str], new_lines: Sequence[str], matcher: difflib.SequenceMatcher[str]
) -> list[tuple[DiffLine, str]]:
    """Pair every line's :class:`DiffLine` with its line as split, ending included."""
    changes: list[tuple[DiffLine, str]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            changes.extend(
                (DiffLine("equal", new_lines[j].removesuffix("\n"), i + 1, j + 1), new_lines[j])
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            )
            continue
        changes.extend(
            (DiffLine("remove", old_lines[i].removesuffix("\n"), i + 1, None), old_lines[i])
            for i in range(i1, i2)
        )
        changes.extend(
            (DiffLine("add", new_lines[j].removesuffix("\n"), None, j + 1), new_lines[j])
            for j in range(j1, j2)
        )
    return changes


def _marked(rendered: Iterable[str]) -> Iterable[str]:
    """Strip line ends, and mark each line that had none as lacking its final newline."""
    for line in rendered:
        if line.endswith("\n"):
            yield line[:-1]
        else:
            yield line
            yield NO_NEWLINE_MARKER


def _counted(
    diff_type: DiffType,
    diff_output: str,
    changes: tuple[DiffLine, ...],
    similarity: float,
    old_content: str | None,
    new_content: str | None,
) -> DiffResult:
    return DiffResult(
        diff_type=diff_type,
        diff_output=diff_output,
        changes=changes,
        additions=sum(line.type == "add" for line in changes),
        deletions=sum(line.type == "remove" for line in changes),
        unchanged=sum(line.type == "equal" for line in changes),
        similarity=similarity,
        old_content=old_content,
        new_content=new_content,
    )


def _flatten(
    mapping: Mapping[Any, Any], ignored: frozenset[str], prefix: tuple[Any, ...] = ()
) -> dict[tuple[Any, ...], Any]:
    # Paths stay tuples so a literal "a.b" key never collides with a nested a -> b.
    flat: dict[tuple[Any, ...], Any] = {}
    for key, value in mapping.items():
        if key in ignored:
            continue
        path = (*prefix, key)
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, ignored, path))
        else:
            flat[path] = value
    return flat
