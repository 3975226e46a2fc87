"""``UndoStore``: a call's undo, requested → undoing → undone | failed, through atomic scripts.

The request pushes the undo's Celery message in the same script (as ``CREATE`` does for a
call), recorded for the sweeper's lost-message check (``undo_push_seq``/``undo_push_tag``,
the ``undo_queued`` index). A worker claims the undo under a lease (``UNDO_START``), so a
second delivery does nothing; the sweeper recovers an undo whose worker died.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from redis.commands.core import Script
from redis.exceptions import NoScriptError

from toolq.errors import WorkerLostError
from toolq.models import EventType, UndoState
from toolq.results import scripts
from toolq.results.connection import as_text
from toolq.results.direct import DirectScripts
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
        client = store.redis
        self._claim = client.register_script(scripts.UNDO_CLAIM)
        self._start = client.register_script(scripts.UNDO_START)
        self._finish = client.register_script(scripts.UNDO_FINISH)
        self._recover = client.register_script(scripts.UNDO_RECOVER)
        self._resend = client.register_script(scripts.UNDO_RESEND)
        self._renew = client.register_script(scripts.RENEW)
        self._direct = DirectScripts(client)

    def request(self, call_id: str, queue: str, message: str) -> str:
        """Mark the undo requested and push its message: ``ok``, or why not.

        ``missing``, ``nothing`` (no undo data), ``undone`` (already), ``in_progress``.
        """
        k = self.keys
        reply = self._claim(
            keys=[k.call(call_id), k.undo(call_id), queue, k.queue_pushes(queue), k.undo_queued],
            args=[call_id, repr(time.time()), message],
        )
        return as_text(reply)

    def start(self, call_id: str, token: str) -> tuple[str, str]:
        """Take the undo lease, requested → undoing: ``(ok|skip|leased, state seen)``."""
        k = self.keys
        now = time.time()
        reply = self._direct(
            self._start,
            [k.call(call_id), k.undo_lease(call_id), k.undoing, k.undo_queued],
            [
                call_id,
                token,
                int(self.settings.lease_seconds * 1000),
                repr(now),
                int(now * 1000),
            ],
        )
        return as_text(reply[0]), as_text(reply[1]) if len(reply) > 1 else ""

    def finish(
        self, call_id: str, run_id: str, token: str, state: UndoState, data: dict[str, Any]
    ) -> bool:
        """Move undoing → ``state`` with its event; False if this worker lost the undo."""
        k = self.keys
        etype = EventType.UNDONE if state is UndoState.UNDONE else EventType.UNDO_FAILED
        reply = self._direct(
            self._finish,
            [
                k.call(call_id),
                k.run_stream(run_id),
                k.undo_lease(call_id),
                k.undoing,
                k.undo(call_id),
            ],
            [
                call_id,
                token,
                state.value,
                etype.value,
                dumps(data),
                k.run_channel(run_id),
                self.settings.stream_maxlen,
                repr(time.time()),
            ],
        )
        return as_text(reply[0]) == "ok"

    def renew(self, leases: dict[str, str]) -> dict[str, bool]:
        """Extend the undo leases held (call id → token); which ones are still ours."""
        k = self.keys
        now_ms = int(time.time() * 1000)
        lease_ms = int(self.settings.lease_seconds * 1000)
        replies = self._pipelined(
            self._renew,
            [
                ([k.undo_lease(call_id), k.undoing], [call_id, token, lease_ms, now_ms])
                for call_id, token in leases.items()
            ],
        )
        return {c: bool(ok) for c, ok in zip(leases, replies, strict=True)}

    def recover(
        self, call_id: str, run_id: str, queue: str, message: str, max_recoveries: int
    ) -> str:
        """An undo whose lease expired: ``failed``, ``requeue``, ``alive`` or ``gone``.

        ``failed`` emits ``call.undo_failed`` (``worker_lost``); ``requeue`` (an idempotent
        tool, recovered fewer than ``max_recoveries`` times) pushes ``message`` again.
        """
        k = self.keys
        reply = self._recover(
            keys=[
                k.call(call_id),
                k.undo_lease(call_id),
                k.undoing,
                k.run_stream(run_id),
                queue,
                k.queue_pushes(queue),
                k.undo_queued,
            ],
            args=[
                call_id,
                repr(time.time()),
                k.run_channel(run_id),
                self.settings.stream_maxlen,
                max_recoveries,
                dumps(WORKER_LOST),
                message,
            ],
        )
        return as_text(reply)

    def resend(self, messages: Sequence[tuple[str, str, str]]) -> int:
        """Push ``(call_id, queue, message)`` for the undos still requested; how many."""
        if not messages:
            return 0
        k = self.keys
        now = repr(time.time())
        replies = self._pipelined(
            self._resend,
            [
                (
                    [k.call(c), q, k.queue_pushes(q), k.undo_queued, k.lost_undo_suspect(c)],
                    [c, message, now],
                )
                for c, q, message in messages
            ],
        )
        return sum(int(n) for n in replies)

    def _pipelined(self, script: Script, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run ``script`` once per ``(keys, args)`` in one round trip.

        After a Redis restart lost the script, load it and run them again (a script that is
        missing ran nowhere).
        """
        for attempt in (1, 2):
            pipe = self.redis.pipeline(transaction=False)
            for keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            try:
                replies: list[Any] = pipe.execute()
                return replies
            except NoScriptError:
                if attempt == 2:
                    raise
                self.redis.script_load(script.script)
        raise AssertionError("unreachable")
