"""``BackgroundWriter``: bookkeeping writes taken off the caller's critical path.

Used only for writes whose loss is repaired elsewhere (a call marked sent late, or not at
all, is re-sent by the sweeper, and a re-sent call is harmless), so a crash between the
caller's return and the flush costs nothing but a duplicate message.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("toolq.background")


class BackgroundWriter:
    """Collects items and hands them, in batches, to ``flush`` on a daemon thread."""

    def __init__(self, flush: Callable[[list[str]], None], name: str) -> None:
        self._flush = flush
        self._items: list[str] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def add(self, items: list[str]) -> None:
        """Queue items for the next flush (returns at once)."""
        with self._cond:
            self._items.extend(items)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                items, self._items = self._items, []
                if not items and self._closed:
                    return
            try:
                self._flush(items)
            except Exception as exc:  # repaired by the sweeper; never crash the caller
                log.warning("background write of %d items failed: %s", len(items), exc)

    def close(self, timeout: float = 2.0) -> None:
        """Flush what is queued and stop."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)
