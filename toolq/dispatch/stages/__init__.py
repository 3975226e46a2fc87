"""The dispatcher's stages: each call of a dispatch goes through them in order.

A stage is one small object with one question for the tool (is the call valid, what does
it cost, where does the policy route it, ...) that fills in the call's ``CallPlan``; the
``Dispatcher`` runs ``STAGES`` over every call and gets one ``NewCall`` per call. A stage
that ``refuses`` turns the call into a failed (or, for ``ToolDeniedError``, denied) call
when it raises ``ToolqError``, and the later stages pass it by.

Order: ``validate`` → ``price`` → ``gate`` → ``seal`` → ``place`` → ``schedule`` →
``charge``. The gate sees the plaintext arguments, the store only sealed ones, so ``seal``
comes after ``gate``; ``charge`` needs the routed call's event data.
"""

from __future__ import annotations

from toolq.dispatch.stages.base import CallPlan, DispatchPlan, Stage, run_stages
from toolq.dispatch.stages.charge import Charge
from toolq.dispatch.stages.gate import Gate
from toolq.dispatch.stages.place import Place
from toolq.dispatch.stages.price import Price
from toolq.dispatch.stages.schedule import Schedule
from toolq.dispatch.stages.seal import Seal
from toolq.dispatch.stages.validate import Validate

__all__ = [
    "CallPlan",
    "Charge",
    "DispatchPlan",
    "Gate",
    "Place",
    "Price",
    "Schedule",
    "Seal",
    "Stage",
    "Validate",
    "run_stages",
]
