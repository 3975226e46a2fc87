"""A call's undo: UNDO_CLAIM, UNDO_START, UNDO_FINISH, UNDO_RECOVER, UNDO_RESEND."""

from __future__ import annotations

from typing import Any, Literal, get_args

from toolq.keys import Keys
from toolq.results.connection import as_text
from toolq.results.runner import Invocation, Script, emit_keys, outcome, push_keys
from toolq.results.scripts.calls import Resend

UndoClaimOutcome = Literal["ok", "missing", "not_succeeded", "in_progress", "undone", "nothing"]


class UndoClaim(Script[UndoClaimOutcome]):
    """An undo requested with its message pushed (``undo_claim.lua``)."""

    file = "undo_claim.lua"
    outcomes = get_args(UndoClaimOutcome)
    includes = ("push",)

    def __call__(
        self, *, keys: Keys, call_id: str, queue: str, message: str, now: str, approval: str
    ) -> Invocation[UndoClaimOutcome]:
        """An invocation: KEYS and ARGV as the header of ``undo_claim.lua`` lists them."""
        return self.invoke(
            keys={
                "call": keys.call(call_id),
                "undo": keys.undo(call_id),
                **push_keys(keys, queue),
                "undo_queued": keys.undo_queued,
            },
            argv={"call_id": call_id, "now": now, "message": message, "approval": approval},
        )


UndoStartOutcome = Literal["ok", "leased", "skip"]


class UndoStart(Script[tuple[UndoStartOutcome, str]]):
    """A worker's lease on a requested undo (``undo_start.lua``): outcome and state seen."""

    file = "undo_start.lua"
    outcomes = get_args(UndoStartOutcome)

    def __call__(
        self, *, keys: Keys, call_id: str, token: str, lease_ms: int, now: str, now_ms: int
    ) -> Invocation[tuple[UndoStartOutcome, str]]:
        """An invocation: KEYS and ARGV as the header of ``undo_start.lua`` lists them."""
        return self.invoke(
            keys={
                "call": keys.call(call_id),
                "undo_lease": keys.undo_lease(call_id),
                "undoing": keys.undoing,
                "undo_queued": keys.undo_queued,
            },
            argv={
                "call_id": call_id,
                "token": token,
                "lease_ms": lease_ms,
                "now": now,
                "now_ms": now_ms,
            },
        )

    def parse(self, reply: Any) -> tuple[UndoStartOutcome, str]:
        """The typed outcome of a reply."""
        kind: UndoStartOutcome = outcome(UndoStartOutcome, reply[0], self)
        return kind, as_text(reply[1]) if len(reply) > 1 else ""


UndoFinishOutcome = Literal["ok", "stale"]


class UndoFinish(Script[UndoFinishOutcome]):
    """The end of an undo, undone or failed, with its event (``undo_finish.lua``)."""

    file = "undo_finish.lua"
    outcomes = get_args(UndoFinishOutcome)
    includes = ("emit",)

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        token: str,
        state: str,
        etype: str,
        data: str,
        maxlen: int,
        now: str,
    ) -> Invocation[UndoFinishOutcome]:
        """An invocation: KEYS and ARGV as the header of ``undo_finish.lua`` lists them."""
        return self.invoke(
            keys={
                "call": keys.call(call_id),
                "stream": keys.run_stream(run_id),
                "undo_lease": keys.undo_lease(call_id),
                "undoing": keys.undoing,
                "undo": keys.undo(call_id),
                **emit_keys(keys),
            },
            argv={
                "call_id": call_id,
                "token": token,
                "state": state,
                "etype": etype,
                "data": data,
                "maxlen": maxlen,
                "now": now,
                "run_id": run_id,
            },
        )


UndoRecoverOutcome = Literal["requeue", "failed", "alive", "gone"]


class UndoRecover(Script[UndoRecoverOutcome]):
    """An undo whose worker died: requested again or failed (``undo_recover.lua``)."""

    file = "undo_recover.lua"
    outcomes = get_args(UndoRecoverOutcome)
    includes = ("emit", "push")

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        queue: str,
        message: str,
        now: str,
        maxlen: int,
        max_recoveries: int,
        lost_data: str,
    ) -> Invocation[UndoRecoverOutcome]:
        """An invocation: KEYS and ARGV as the header of ``undo_recover.lua`` lists them."""
        return self.invoke(
            keys={
                "call": keys.call(call_id),
                "undo_lease": keys.undo_lease(call_id),
                "undoing": keys.undoing,
                "stream": keys.run_stream(run_id),
                **push_keys(keys, queue),
                "undo_queued": keys.undo_queued,
                **emit_keys(keys),
            },
            argv={
                "call_id": call_id,
                "now": now,
                "maxlen": maxlen,
                "max_recoveries": max_recoveries,
                "lost_data": lost_data,
                "message": message,
                "run_id": run_id,
            },
        )


class UndoResend(Resend):
    """The sweeper's re-send of an undo still requested (``undo_resend.lua``)."""

    file = "undo_resend.lua"

    def marks(self, keys: Keys, call_id: str) -> dict[str, str]:
        """The KEYS after the push's: the undos' pushed index and the suspicion mark."""
        return {"undo_queued": keys.undo_queued, "suspect": keys.lost_undo_suspect(call_id)}


UNDO_CLAIM = UndoClaim()
UNDO_START = UndoStart()
UNDO_FINISH = UndoFinish()
UNDO_RECOVER = UndoRecover()
UNDO_RESEND = UndoResend()
