"""Objects a forked child starts afresh, before any of its code runs.

A child forked from a process with threads has only the thread that forked: the others,
what they had queued, and every lock one of them held at that instant stay in the parent,
but the child's copies of those locks are still held, by nobody. An object of the client's
that threads share (the waits' reader, the group committers, the pace of waits) is told in
the child, from ``os.register_at_fork``, to drop the parent's state and make new locks
(``after_fork``), before the forking thread returns from ``fork`` and before any thread of
the child's can take one. Checking ``os.getpid()`` at each use instead would take the
lock first, or let two of the child's threads each make a lock of their own.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class Fresh(Protocol):
    """An object that drops its parent's threads' state in a forked child."""

    def after_fork(self) -> None:
        """Called in the child, in the forking thread, before ``fork`` returns there."""


_objects: weakref.WeakValueDictionary[int, Fresh] = weakref.WeakValueDictionary()
"""By ``id``: an object need not be hashable (a dataclass that compares by value is not)."""


def fresh_in_children(obj: Fresh) -> None:
    """Have ``obj.after_fork()`` called in every child forked while it lives."""
    _objects[id(obj)] = obj


def _in_the_child() -> None:
    for obj in list(_objects.values()):
        obj.after_fork()


os.register_at_fork(after_in_child=_in_the_child)
