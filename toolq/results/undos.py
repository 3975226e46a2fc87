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

from toolq.errors import WorkerLostError
from toolq.models import EventType, UndoState
from toolq.results import scripts
from toolq.results.store import CallStore, dumps

WORKER_LOST = {
    "error": "worker lost during undo; the tool is not idempotent, so its undo was not run "
    "again (request it again to retry)",
    "error_type": WorkerLostError.code,
}
"""``call.undo_failed`` data of an undo whose worker died."""


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
        optimistic transaction on the record: two approvers asking at once both count.
        """
        key = self.keys.call(call_id)
        out: dict[str, str] = {}

        def apply(pipe: Any) -> None:
            nonlocal out
            raw = pipe.hget(key, "undo_votes")
            try:
                stored = json.loads(raw) if raw else []
            except ValueError:
                stored = []
            waiting = [s for s in stored if isinstance(s, str)] if isinstance(stored, list) else []
            out = held([*waiting, approval])
            pipe.multi()
            if len(out) < required:
                pipe.hset(key, "undo_votes", json.dumps(list(out.values())))

        self.redis.transaction(apply, key)
        return out

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
