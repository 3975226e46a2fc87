"""``CreateCommit``: the CREATEs of a process's concurrent dispatches, in one round trip.

Many conversations in one client process each dispatch a few calls at a time. A dispatch
whose calls are planned while another dispatch's CREATE pipeline is in flight waits for it
to come back, then goes with every other dispatch queued meanwhile in the next pipeline,
as a database's group commit does (``toolq.results.group_commit``; the worker's FINISHes
go the same way).
The first dispatch to arrive sends at once: nothing waits for a timer or for company.

The pipeline's queued calls share messages by the dispatcher's own rules, whichever
dispatch they come from (a batch message carries each call's run), so a worker gets one
message, not one per dispatch. Each dispatch gets the replies of its own calls only; an
error of the shared round trip (Redis down, read-only, full) is raised in every dispatch it
carried, while a script's error (one dispatch's keys refused) is its own dispatch's: the
dispatches are sent again, each alone. Each call's CREATE is claimed under its own
idempotency key, so a dispatch sent again is answered from what was written, never twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolq.results.group_commit import GroupCommitter, Request
from toolq.results.store import CallStore, MessageGroup, NewCall

if TYPE_CHECKING:
    from toolq.models import RiskLevel
    from toolq.results.runner import Invocation

Messages = Callable[[list[NewCall]], tuple[list[NewCall], list[MessageGroup]]]
"""``Dispatcher._messages``: the calls with their lone messages set, and the shared ones."""
Created = tuple[list[NewCall], list[tuple[str, str]]]
"""A dispatch's calls as created (lone messages set) and CREATE's reply for each."""


@dataclass
class _Request(Request):
    calls: Sequence[NewCall]
    created: Created = field(default_factory=lambda: ([], []))

    def answer(self) -> Created:
        if self.error is not None:
            raise self.error
        return self.created


class CreateCommit(GroupCommitter[_Request]):
    """Creates the calls of one process's dispatches, several dispatches' per round trip."""

    def __init__(
        self,
        store: CallStore,
        messages: Messages,
        admit: Callable[[RiskLevel], Invocation[Any]] | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.messages = messages
        self.admit = admit

    def create(self, calls: Sequence[NewCall]) -> Created:
        """``CallStore.create_many`` of one dispatch's calls, in the next round trip.

        Sent at once when no other dispatch's round trip is in flight, else with the
        dispatches queued behind it.
        """
        if not calls:
            return [], []
        return self._join(_Request(calls)).answer()

    def _round_trip(self, batch: list[_Request]) -> None:
        """One pipeline for every call of ``batch``, its replies split back by request."""
        calls, groups = self.messages([c for request in batch for c in request.calls])
        replies = self.store.create_many(calls, groups, admit=self.admit)
        start = 0
        for request in batch:
            end = start + len(request.calls)
            request.created = calls[start:end], replies[start:end]
            start = end
