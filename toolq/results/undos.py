"""``UndoStore``: a call's undo, requested → undoing → undone | failed, through atomic scripts.

The request pushes the undo's Celery message in the same script (as ``CREATE`` does for a
call), recorded for the sweeper's lost-message check (``undo_push_seq``/``undo_push_tag``,
the ``undo_queued`` index). A worker claims the undo under a lease (``UNDO_START``), so a
second delivery does nothing; the sweeper recovers an undo whose worker died.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from toolq.errors import CallNotFoundError, UndoError, WorkerLostError
from toolq.models import EventType, UndoState
from toolq.results import scripts
from toolq.results.connection import as_text
from toolq.results.store import CallStore, dumps

WORKER_LOST = {
    "error": "worker lost during undo; the tool is not idempotent, so its undo was not run "
    "again (request it again to retry)",
    "error_type": WorkerLostError.code,
}
"""``call.undo_failed`` data of an undo whose worker died."""


VOTE_ATTEMPTS = 10
"""Optimistic transactions ``UndoStore.vote`` tries before it gives up (the record kept
changing under it: a Redis writer at it)."""
VOTES_MAX_BYTES = 1024 * 1024
"""Longest ``undo_votes`` field read (a quorum's approvals are a few KB)."""


def _waiting(raw: Any) -> list[str]:
    """The approvals waiting in a record's ``undo_votes`` (none from anything else)."""
    if not raw or len(raw) > VOTES_MAX_BYTES:
        return []
    try:
        stored = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    return [s for s in stored if isinstance(s, str)] if isinstance(stored, list) else []


REFUSALS = {
    "not_succeeded": "only a call that succeeded has an effect to undo",
    "nothing": "it has nothing to undo",
    "undone": "it was undone already",
    "in_progress": "an undo is already in progress",
}
"""Why an undo is not requested, by ``UNDO_CLAIM``'s answer."""


def _check_votable(call_id: str, status: Any, state: Any) -> None:
    """Raise unless the call is one an approval of its undo can wait on (as UNDO_CLAIM)."""
    if status is None:
        raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
    undo_state = as_text(state) if state is not None else None
    refused = None
    if as_text(status) != "succeeded":
        refused = "not_succeeded"
    elif undo_state in ("requested", "undoing"):
        refused = "in_progress"
    elif undo_state == "undone":
        refused = "undone"
    if refused is not None:
        raise UndoError(f"cannot undo call {call_id}: {REFUSALS[refused]}", call_id=call_id)


class UndoStore:
    """Requests, claims, finishes and recovers undos of finished calls."""

    def __init__(self, store: CallStore) -> None:
        self.store = store
        self.redis = store.redis
        self.keys = store.keys
        self.settings = store.settings
        self.scripts = store.scripts

    def request(
        self, call_id: str, queue: str, message: str, approval: str = ""
    ) -> scripts.UndoClaimOutcome:
        """Mark the undo requested and push its message: ``ok``, or why not.

        ``missing``, ``not_succeeded``, ``nothing`` (no undo data), ``undone`` (already),
        ``in_progress``. ``approval``: the signed approval of the undo (``''``: none), kept
        on the record for the worker (``toolq.approvals.undoing``).
        """
        return self.scripts.run(
            scripts.UNDO_CLAIM(
                keys=self.keys,
                call_id=call_id,
                queue=queue,
                message=message,
                now=repr(time.time()),
                approval=approval,
            )
        )

    def vote(
        self,
        call_id: str,
        approval: str,
        held: Callable[[list[str]], dict[str, str]],
        required: int,
    ) -> dict[str, str]:
        """Add ``approval`` to the undo approvals waiting on the call's record: those held.

        ``held`` keeps, of the waiting ones and this one, those that hold for the undo data
        now, by approver (a Redis writer's, or an approval of data since rewritten, does
        not count). Fewer than ``required``: they wait on the record (``undo_votes``,
        replacing the ones that no longer hold); enough: ``UNDO_CLAIM`` clears them. An
        optimistic transaction on the record: two approvers asking at once both count. Only
        for a call that succeeded and whose undo is not in progress or done (``UndoError``:
        no approval is kept for a later undo).
        """
        key = self.keys.call(call_id)
        for _ in range(VOTE_ATTEMPTS):
            pipe: Any
            with self.redis.pipeline() as pipe:
                try:
                    pipe.watch(key)
                    status, state, raw = pipe.hmget(key, "status", "undo_state", "undo_votes")
                    _check_votable(call_id, status, state)
                    # the new approval first: it renews the asker's own older one, and no
                    # stored entry (a Redis writer's junk) can crowd it out
                    out = held([approval, *_waiting(raw)])
                    pipe.multi()
                    if len(out) < required:
                        pipe.hset(key, "undo_votes", json.dumps(list(out.values())))
                    pipe.execute()
                    return out
                except redis.WatchError:
                    continue
        raise UndoError(
            f"call {call_id} kept changing while the undo approval was recorded; ask again",
            call_id=call_id,
        )

    def start(self, call_id: str, token: str) -> tuple[scripts.UndoStartOutcome, str]:
        """Take the undo lease, requested → undoing: ``(ok|skip|leased, state seen)``."""
        now = time.time()
        return self.scripts.direct(
            scripts.UNDO_START(
                keys=self.keys,
                call_id=call_id,
                token=token,
                lease_ms=int(self.settings.lease_seconds * 1000),
                now=repr(now),
                now_ms=int(now * 1000),
            )
        )

    def finish(
        self, call_id: str, run_id: str, token: str, state: UndoState, data: dict[str, Any]
    ) -> bool:
        """Move undoing → ``state`` with its event; False if this worker lost the undo."""
        etype = EventType.UNDONE if state is UndoState.UNDONE else EventType.UNDO_FAILED
        outcome = self.scripts.direct(
            scripts.UNDO_FINISH(
                keys=self.keys,
                call_id=call_id,
                run_id=run_id,
                token=token,
                state=state.value,
                etype=etype.value,
                data=dumps(data),
                maxlen=self.settings.stream_maxlen,
                now=repr(time.time()),
            )
        )
        return outcome == "ok"

    def renew(self, leases: dict[str, str]) -> dict[str, bool]:
        """Extend the undo leases held (call id → token); which ones are still ours."""
        k = self.keys
        now_ms = int(time.time() * 1000)
        lease_ms = int(self.settings.lease_seconds * 1000)
        renewed = self.scripts.pipelined(
            [
                scripts.RENEW(
                    lease=k.undo_lease(call_id),
                    running=k.undoing,
                    call_id=call_id,
                    token=token,
                    lease_ms=lease_ms,
                    now_ms=now_ms,
                )
                for call_id, token in leases.items()
            ]
        )
        return dict(zip(leases, renewed, strict=True))

    def recover(
        self, call_id: str, run_id: str, queue: str, message: str, max_recoveries: int
    ) -> scripts.UndoRecoverOutcome:
        """An undo whose lease expired: ``failed``, ``requeue``, ``alive`` or ``gone``.

        ``failed`` emits ``call.undo_failed`` (``worker_lost``); ``requeue`` (an idempotent
        tool, recovered fewer than ``max_recoveries`` times) pushes ``message`` again.
        """
        return self.scripts.run(
            scripts.UNDO_RECOVER(
                keys=self.keys,
                call_id=call_id,
                run_id=run_id,
                queue=queue,
                message=message,
                now=repr(time.time()),
                maxlen=self.settings.stream_maxlen,
                max_recoveries=max_recoveries,
                lost_data=dumps(WORKER_LOST),
            )
        )

    def resend(self, messages: Sequence[tuple[str, str, str]]) -> int:
        """Push ``(call_id, queue, message)`` for the undos still requested; how many."""
        if not messages:
            return 0
        now = repr(time.time())
        pushed = self.scripts.pipelined(
            [
                scripts.UNDO_RESEND(keys=self.keys, call_id=c, queue=q, message=message, now=now)
                for c, q, message in messages
            ]
        )
        return sum(pushed)
