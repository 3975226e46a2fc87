"""``Workspace``: a root directory that model-chosen paths cannot leave.

Two steps, so that a check cannot be raced by a later swap:

1. ``resolve`` checks the path component by component against ``realpath(root)``: ``..``
   is refused, absolute paths must lie under the root, and a symlink is followed only when
   its target (``realpath``) is inside the root too. The answer is the path's components
   below the root, with no symlink left in them.
2. ``open_parent`` walks those components again with ``openat(O_NOFOLLOW | O_DIRECTORY)``
   from a descriptor of the root, and callers open the last component relative to that
   descriptor with ``O_NOFOLLOW``. A directory replaced by a symlink in between makes the
   walk fail instead of leaving the root.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import PurePosixPath

from toolq.errors import ConfigurationError, ToolDeniedError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_SYMLINKS = 40


def _below(path: str, base: str) -> tuple[str, ...] | None:
    """The components of ``path`` under ``base`` (compared whole, never as a prefix)."""
    parts, base_parts = PurePosixPath(path).parts, PurePosixPath(base).parts
    if parts[: len(base_parts)] != base_parts:
        return None
    return tuple(parts[len(base_parts) :])


class Workspace:
    """A directory that every path given to a built-in tool is resolved in."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.given = os.path.abspath(os.fspath(root))
        self.root = os.path.realpath(self.given)
        if not os.path.isdir(self.root):
            raise ConfigurationError(f"workspace root {self.given!r} is not a directory")

    def denied(self, path: str, why: str) -> ToolDeniedError:
        """The error for a path that may not be used."""
        return ToolDeniedError(
            f"path {path!r} refused: {why} (workspace: {self.root})",
            path=path,
            reason="outside_workspace",
        )

    def resolve(self, path: str) -> tuple[str, ...]:
        """Components of ``path`` below the root, symlinks inside the root followed.

        Raises ``ToolDeniedError`` naming the path when it would leave the root.
        """
        if "\x00" in path:
            raise self.denied(path, "it contains a NUL byte")
        if ".." in PurePosixPath(path).parts:
            raise self.denied(path, "'..' is not allowed")
        if os.path.isabs(path):
            normal = os.path.normpath(path)
            rel = _below(normal, self.root)
            if rel is None:
                rel = _below(normal, self.given)
            if rel is None:
                raise self.denied(path, "absolute path outside the workspace")
            pending = list(rel)
        else:
            pending = list(PurePosixPath(path).parts)
        resolved: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            candidate = os.path.join(self.root, *resolved, part)
            try:
                mode = os.lstat(candidate).st_mode
            except FileNotFoundError:
                resolved.append(part)
                continue
            except NotADirectoryError:
                raise self.denied(path, f"{'/'.join(resolved)!r} is not a directory") from None
            if stat.S_ISLNK(mode):
                hops += 1
                target = _below(os.path.realpath(candidate), self.root)
                if target is None or hops > _MAX_SYMLINKS:
                    raise self.denied(path, f"symlink {part!r} points outside the workspace")
                resolved = list(target)
                continue
            resolved.append(part)
        return tuple(resolved)

    def display(self, parts: Sequence[str]) -> str:
        """The workspace-relative form of resolved components, as shown to the model."""
        return "/".join(parts) or "."

    def absolute(self, parts: Sequence[str]) -> str:
        """The absolute path of resolved components."""
        return os.path.join(self.root, *parts)

    def open_parent(self, parts: Sequence[str], *, create: bool = False) -> tuple[int, list[str]]:
        """A descriptor of the directory holding ``parts[-1]``, walked without following links.

        With ``create``, missing directories are made; their paths come back so undo can
        remove them. The caller closes the descriptor.
        """
        fd = os.open(self.root, _DIR_FLAGS)
        made: list[str] = []
        try:
            for depth, part in enumerate(parts[:-1]):
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made.append("/".join(parts[: depth + 1]))
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        where = "/".join(parts[: depth + 1])
                        raise self.denied(where, "not a directory inside the workspace") from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd, made
