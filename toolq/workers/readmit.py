"""``Readmit``: runs ADMIT again at the moment a full rate limit frees a start.

ADMIT runs after dispatches, after scheduled calls end and on every sweep; a rate limit,
though, frees a start when its oldest start leaves the window, which none of those
moments follows. Left to the sweep, a flooded limit admitted only when the sweep came
after that moment: every other sweep, for a limit of a window of one sweep interval.
ADMIT tells when its first full rate limit frees (``AdmitReply.due_ms``); each worker
process that ran it runs it again then (the runs of several processes are harmless: each
admits only what the limits allow).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from toolq.models import RiskLevel

log = logging.getLogger("toolq.worker")


class Readmit(threading.Thread):
    """One daemon thread that calls ``admit(risks)`` at the times ``at`` is given."""

    def __init__(self, admit: Callable[[Iterable[RiskLevel]], object]) -> None:
        super().__init__(name="toolq-readmit", daemon=True)
        self.admit = admit
        self._due: dict[RiskLevel, float] = {}
        self._changed = threading.Condition()
        self._stopping = False

    def at(self, risk: RiskLevel, when: float) -> None:
        """Run ADMIT for ``risk`` at ``when`` (``time.time()`` seconds), or earlier if asked."""
        with self._changed:
            current = self._due.get(risk)
            if current is None or when < current:
                self._due[risk] = when
                self._changed.notify()

    def stop(self) -> None:
        """End the thread (in-process test workers close their runtimes)."""
        with self._changed:
            self._stopping = True
            self._changed.notify()

    def run(self) -> None:
        """Wait for the earliest due time; admit the risks due then."""
        while True:
            with self._changed:
                while not self._stopping:
                    now = time.time()
                    due = [risk for risk, when in self._due.items() if when <= now]
                    if due:
                        break
                    wait = min(self._due.values(), default=now + 3600) - now
                    self._changed.wait(wait)
                if self._stopping:
                    return
                for risk in due:
                    del self._due[risk]
            try:
                self.admit(due)  # which tells ``at`` the next due time, if any
            except Exception:  # the sweeper admits on its next pass
                log.exception("admission failed")
