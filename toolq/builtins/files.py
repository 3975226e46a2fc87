"""Workspace-jailed file tools: ``read_file``, ``write_file``, ``append_file``, ``insert_lines``.

Paths go through :class:`~toolq.builtins.workspace.Workspace`; every open is relative to a
directory descriptor and uses ``O_NOFOLLOW``. Writes go to a temporary file in the same
directory and are renamed over the target, so a hard link to a file outside the root is
replaced, never written through, and a reader never sees half a file. The edit tools
preview ``{"path", "before", "after"}`` (approvers see a unified diff) and return undo data
that restores the previous content, or removes the file the call created. Undo refuses if
the file changed after the call.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from toolq.builtins.workspace import Workspace
from toolq.errors import InvalidArgumentsError, UndoError
from toolq.models import RiskLevel, ToolOutput
from toolq.registry.tool import Tool

DEFAULT_MAX_READ_BYTES = 256 * 1024
DEFAULT_MAX_FILE_BYTES = 1024 * 1024

_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: never hang on a FIFO


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _FileTool(Tool):
    """Shared workspace plumbing of the file tools."""

    tags = ("files",)
    category = "files"

    def __init__(self, workspace: Workspace, max_read_bytes: int, max_file_bytes: int) -> None:
        self.workspace = workspace
        self.max_read_bytes = max_read_bytes
        self.max_file_bytes = max_file_bytes
        super().__init__()

    def _open_existing(self, parts: Sequence[str], path: str) -> int | None:
        """A descriptor of the regular file at ``parts``, or ``None`` if there is none."""
        if not parts:
            raise InvalidArgumentsError(f"{path!r} is the workspace directory, not a file")
        try:
            parent, _ = self.workspace.open_parent(parts)
        except FileNotFoundError:
            return None
        try:
            fd = os.open(parts[-1], os.O_RDONLY | _FILE_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self.workspace.denied(path, exc.strerror or "cannot be opened") from None
        finally:
            os.close(parent)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InvalidArgumentsError(f"{path!r} is not a regular file")
        return fd

    def _current(self, parts: Sequence[str], path: str) -> str | None:
        """The whole text of an existing file (within the edit size cap), or ``None``."""
        fd = self._open_existing(parts, path)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read(self.max_file_bytes + 1)
        if len(data) > self.max_file_bytes:
            raise InvalidArgumentsError(
                f"{path!r} is larger than {self.max_file_bytes} bytes; it cannot be edited here"
            )
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgumentsError(f"{path!r} is not UTF-8 text") from None

    def _store(self, parts: Sequence[str], path: str, text: str) -> list[str]:
        """Replace the file with ``text`` atomically; return directories it had to create."""
        data = text.encode("utf-8")
        if len(data) > self.max_file_bytes:
            raise InvalidArgumentsError(
                f"the new content of {path!r} is over {self.max_file_bytes} bytes"
            )
        parent, made = self.workspace.open_parent(parts, create=True)
        name = parts[-1]
        temp = f".{name}.toolq-{secrets.token_hex(4)}.tmp"
        try:
            try:
                old: os.stat_result | None = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            if old is not None and not stat.S_ISREG(old.st_mode):
                raise InvalidArgumentsError(f"{path!r} exists and is not a regular file")
            owner = old if old is not None else os.fstat(parent)
            mode = stat.S_IMODE(old.st_mode) if old is not None else 0o666 & ~_umask()
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o600, dir_fd=parent
            )
            try:
                with os.fdopen(fd, "wb", closefd=False) as f:
                    f.write(data)
                    f.flush()
                    os.fsync(fd)
                if os.geteuid() == 0:
                    # A file keeps its owner; a new one takes its directory's owner, so a
                    # workspace owned by the sandbox user stays editable by it.
                    os.fchown(fd, owner.st_uid, owner.st_gid)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
            raise
        finally:
            os.close(parent)
        return made

    def _remove(self, parts: Sequence[str], made: Sequence[str]) -> None:
        parent, _ = self.workspace.open_parent(parts)
        try:
            os.unlink(parts[-1], dir_fd=parent)
        finally:
            os.close(parent)
        for directory in reversed(made):  # directories the call created, if now empty
            with contextlib.suppress(OSError):
                dir_parts = self.workspace.resolve(directory)
                holder, _ = self.workspace.open_parent(dir_parts)
                try:
                    os.rmdir(dir_parts[-1], dir_fd=holder)
                finally:
                    os.close(holder)


def _umask() -> int:
    # Reading the umask means setting it; it is process-wide, so restore it at once.
    current = os.umask(0o022)
    os.umask(current)
    return current


class ReadFile(_FileTool):
    """Read a UTF-8 text file from the workspace, optionally only a range of lines.

    Returns the content with its line numbers; long files are cut at a size cap and say so
    with ``truncated``. Use ``start_line``/``end_line`` to page through a large file.
    """

    name = "read_file"
    risk = RiskLevel.SAFE
    idempotent = True

    def execute(
        self,
        path: str,
        start_line: Annotated[int, Field(ge=1)] | None = None,
        end_line: Annotated[int, Field(ge=1)] | None = None,
    ) -> dict[str, Any]:
        """Read a file.

        Args:
            path: File path relative to the workspace root (absolute paths must be inside it).
            start_line: First line to return, 1-based (default: the first line).
            end_line: Last line to return, inclusive (default: the last line).

        """
        first = start_line or 1
        if end_line is not None and end_line < first:
            raise InvalidArgumentsError(f"end_line {end_line} is before start_line {first}")
        parts = self.workspace.resolve(path)
        fd = self._open_existing(parts, path)
        if fd is None:
            raise InvalidArgumentsError(f"no file at {path!r} in the workspace")
        kept: list[bytes] = []
        size, last, seen, truncated = 0, first - 1, 0, False
        with os.fdopen(fd, "rb") as f:
            for seen, line in enumerate(f, start=1):
                if seen < first:
                    continue
                if end_line is not None and seen > end_line:
                    break
                room = self.max_read_bytes - size
                last = seen
                if len(line) > room:
                    kept.append(line[:room])
                    truncated = True
                    break
                kept.append(line)
                size += len(line)
        if not kept and first > 1:
            raise InvalidArgumentsError(
                f"start_line {first} is past the end of {path!r} ({seen} lines)"
            )
        return {
            "path": self.workspace.display(parts),
            "content": b"".join(kept).decode("utf-8", errors="replace"),
            "start_line": first,
            "end_line": last,
            "truncated": truncated,
        }


class _EditTool(_FileTool):
    """An edit: preview shows before/after; undo restores ``before``."""

    risk = RiskLevel.MODERATE

    def _plan(self, path: str, **arguments: Any) -> tuple[tuple[str, ...], str | None, str]:
        """Resolved path, current text (``None`` if absent) and the text after the edit."""
        raise NotImplementedError

    def preview(self, path: str, **arguments: Any) -> dict[str, Any]:
        """What the edit would change: the approval record renders it as a unified diff."""
        parts, before, after = self._plan(path, **arguments)
        return {"path": self.workspace.display(parts), "before": before, "after": after}

    def _apply(self, path: str, **arguments: Any) -> ToolOutput:
        parts, before, after = self._plan(path, **arguments)
        made = self._store(parts, path, after)
        shown = self.workspace.display(parts)
        undo = {
            "path": shown,
            "before": before,
            "after_sha256": _sha256(after),
            "created_dirs": made,
        }
        data = {"path": shown, "created": before is None, "bytes": len(after.encode("utf-8"))}
        return ToolOutput.ok(data, undo_metadata=undo)

    def undo(self, undo_data: dict[str, Any]) -> dict[str, Any]:
        """Put back the content from before the call (or remove the file it created)."""
        path = str(undo_data["path"])
        parts = self.workspace.resolve(path)
        current = self._current(parts, path)
        if current is None or _sha256(current) != undo_data["after_sha256"]:
            raise UndoError(f"{path!r} changed after the call; not undoing over newer content")
        before = undo_data.get("before")
        if before is None:
            self._remove(parts, [str(d) for d in undo_data.get("created_dirs") or []])
            return {"path": path, "removed": True}
        self._store(parts, path, str(before))
        return {"path": path, "restored": True}


class WriteFile(_EditTool):
    """Create or overwrite a UTF-8 text file in the workspace with the given content.

    Missing parent directories are created. The previous content can be restored by undo.
    """

    name = "write_file"

    def _plan(self, path: str, **arguments: Any) -> tuple[tuple[str, ...], str | None, str]:
        parts = self.workspace.resolve(path)
        return parts, self._current(parts, path), str(arguments["content"])

    def execute(self, path: str, content: str) -> ToolOutput:
        """Write a file.

        Args:
            path: File path relative to the workspace root.
            content: The complete new content of the file.

        """
        return self._apply(path, content=content)


class AppendFile(_EditTool):
    """Append text to the end of a UTF-8 text file in the workspace (created if missing)."""

    name = "append_file"

    def _plan(self, path: str, **arguments: Any) -> tuple[tuple[str, ...], str | None, str]:
        parts = self.workspace.resolve(path)
        before = self._current(parts, path)
        return parts, before, (before or "") + str(arguments["content"])

    def execute(self, path: str, content: str) -> ToolOutput:
        """Append to a file.

        Args:
            path: File path relative to the workspace root.
            content: Text added at the end as is (include a trailing newline if you want one).

        """
        return self._apply(path, content=content)


class InsertLines(_EditTool):
    """Insert lines into an existing UTF-8 text file so the new text starts at line ``line``.

    ``line`` 1 inserts at the top; the file's line count + 1 appends at the end.
    """

    name = "insert_lines"

    def _plan(self, path: str, **arguments: Any) -> tuple[tuple[str, ...], str | None, str]:
        parts = self.workspace.resolve(path)
        before = self._current(parts, path)
        if before is None:
            raise InvalidArgumentsError(f"no file at {path!r} in the workspace")
        lines = before.splitlines(keepends=True)
        line = int(arguments["line"])
        if line > len(lines) + 1:
            raise InvalidArgumentsError(
                f"line {line} is past the end of {path!r} ({len(lines)} lines; "
                f"use {len(lines) + 1} to append)"
            )
        text = str(arguments["text"])
        if text and not text.endswith("\n"):
            text += "\n"
        if line > len(lines) and lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines.insert(line - 1, text)
        return parts, before, "".join(lines)

    def execute(self, path: str, line: Annotated[int, Field(ge=1)], text: str) -> ToolOutput:
        """Insert lines.

        Args:
            path: File path relative to the workspace root; the file must exist.
            line: 1-based line number the inserted text will start at.
            text: The lines to insert (a final newline is added if missing).

        """
        return self._apply(path, line=line, text=text)


def files(
    root: str | os.PathLike[str],
    *,
    max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> list[Tool]:
    """File tools confined to ``root``: ``read_file`` (SAFE) and three MODERATE edits.

    ``max_read_bytes`` caps what one ``read_file`` returns; ``max_file_bytes`` caps the files
    the edit tools touch (before and after are kept for the diff and for undo).
    """
    workspace = Workspace(root)
    return [
        cls(workspace, max_read_bytes, max_file_bytes)
        for cls in (ReadFile, WriteFile, AppendFile, InsertLines)
    ]
