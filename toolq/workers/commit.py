"""``GroupCommit``: the STARTs and FINISHes of a process's slots, gathered into round trips.

A threads-pool worker runs one call per thread; calls that end, or start, while another
thread's round trip is in flight wait for it to come back and then go together in the next
one, as a database's group commit does. The first thread to arrive sends at once, its own
writes and whatever else is queued (nothing, when it is alone): no call waits for a timer
or for company, only for the round trip already in flight. Each thread returns once Redis
has answered its own writes, so a FINISH is in Redis before its message is acknowledged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolq.models import CallEnvelope, CallResult
from toolq.results.group_commit import GroupCommitter, Request
from toolq.results.store import CallStore, Started

Finished = tuple[CallEnvelope, str, CallResult]
"""A call that ended: ``(envelope, token, result)``."""
Starting = tuple[str, str, str]
"""A call to start: ``(call_id, run_id, token)``."""


@dataclass
class _Request(Request):
    finished: Sequence[Finished]
    starts: Sequence[Starting]
    after: Sequence[tuple[Any, ...]]
    held: list[bool] = field(default_factory=list)
    started: list[Started] = field(default_factory=list)

    def answer(self) -> tuple[list[bool], list[Started]]:
        if self.error is not None:
            raise self.error
        return self.held, self.started


class GroupCommit(GroupCommitter[_Request]):
    """Commits a process's finishes and starts, several threads' in one round trip."""

    def __init__(self, store: CallStore, cancelled: dict[str, Any]) -> None:
        super().__init__()
        self.store = store
        self.cancelled = cancelled
        """The result a START writes for a call cancelled before it started."""

    def commit(
        self,
        finished: Sequence[Finished],
        starts: Sequence[Starting],
        after: Sequence[tuple[Any, ...]] = (),
    ) -> tuple[list[bool], list[Started]]:
        """``CallStore.commit`` of these writes, in the next round trip of the process.

        Sent at once when no other thread's round trip is in flight, else with the writes
        queued behind it. Errors are this request's own (a round trip that failed as a
        whole fails every request it carried; each is safe to repeat). ``after``: commands
        to send behind the writes (``toolq.broker.acks``), safe to repeat as well.
        """
        return self._join(_Request(finished, starts, after)).answer()

    def _round_trip(self, batch: list[_Request]) -> None:
        """One ``CallStore.commit`` of every request's writes, its replies split back."""
        finished = [item for request in batch for item in request.finished]
        starts = [item for request in batch for item in request.starts]
        after = [command for request in batch for command in request.after]
        held, started = self.store.commit(finished, starts, self.cancelled, after)
        for request in batch:
            f, s = len(request.finished), len(request.starts)
            request.held, held = held[:f], held[f:]
            request.started, started = started[:s], started[s:]
