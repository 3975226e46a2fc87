"""One typed wrapper per Lua script of ``toolq/results/lua``: keyword arguments in, outcome out.

Every state change of a call is one of these scripts: an atomic compare-and-set that updates
the record and appends the event to the run's stream (``lib/emit.lua``), which wakes the
readers blocked on it, so a record and its event never disagree. Each wrapper computes the
script's KEYS from ``Keys`` in the order of the file's header; no script builds a key name
itself.
"""

from __future__ import annotations

from typing import Any

from toolq.results.runner import Script
from toolq.results.scripts.approvals import (
    DECIDE,
    EXPIRE,
    Decide,
    DecideOutcome,
    DecideReply,
    Decision,
    Expire,
    ExpireOutcome,
)
from toolq.results.scripts.calls import (
    CREATE,
    FINISH,
    PROGRESS,
    RECOVER,
    RENEW,
    RESEND,
    START,
    TRANSITION,
    Create,
    CreateOutcome,
    CreateReply,
    Finish,
    FinishOutcome,
    Progress,
    ProgressOutcome,
    Recover,
    RecoverOutcome,
    Renew,
    Resend,
    Start,
    StartOutcome,
    StartReply,
    Transition,
    TransitionOutcome,
    TransitionReply,
)
from toolq.results.scripts.undos import (
    UNDO_CLAIM,
    UNDO_FINISH,
    UNDO_RECOVER,
    UNDO_RESEND,
    UNDO_START,
    UndoClaim,
    UndoClaimOutcome,
    UndoFinish,
    UndoFinishOutcome,
    UndoRecover,
    UndoRecoverOutcome,
    UndoResend,
    UndoStart,
    UndoStartOutcome,
)
from toolq.results.scripts.webhooks import WEBHOOK_CLAIM, WebhookClaim

ALL: tuple[Script[Any], ...] = (
    CREATE,
    START,
    FINISH,
    PROGRESS,
    RENEW,
    TRANSITION,
    RECOVER,
    RESEND,
    DECIDE,
    EXPIRE,
    UNDO_CLAIM,
    UNDO_START,
    UNDO_FINISH,
    UNDO_RECOVER,
    UNDO_RESEND,
    WEBHOOK_CLAIM,
)
"""Every script, one per ``.lua`` file outside ``lib/``."""

__all__ = [
    "ALL",
    "CREATE",
    "DECIDE",
    "EXPIRE",
    "FINISH",
    "PROGRESS",
    "RECOVER",
    "RENEW",
    "RESEND",
    "START",
    "TRANSITION",
    "UNDO_CLAIM",
    "UNDO_FINISH",
    "UNDO_RECOVER",
    "UNDO_RESEND",
    "UNDO_START",
    "WEBHOOK_CLAIM",
    "Create",
    "CreateOutcome",
    "CreateReply",
    "Decide",
    "DecideOutcome",
    "DecideReply",
    "Decision",
    "Expire",
    "ExpireOutcome",
    "Finish",
    "FinishOutcome",
    "Progress",
    "ProgressOutcome",
    "Recover",
    "RecoverOutcome",
    "Renew",
    "Resend",
    "Start",
    "StartOutcome",
    "StartReply",
    "Transition",
    "TransitionOutcome",
    "TransitionReply",
    "UndoClaim",
    "UndoClaimOutcome",
    "UndoFinish",
    "UndoFinishOutcome",
    "UndoRecover",
    "UndoRecoverOutcome",
    "UndoResend",
    "UndoStart",
    "UndoStartOutcome",
    "WebhookClaim",
]
