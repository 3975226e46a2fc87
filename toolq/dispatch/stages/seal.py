"""``Seal``: the arguments as stored, every secret value encrypted (``SecretBox``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from toolq.secretbox import seal_arguments

if TYPE_CHECKING:
    from toolq.dispatch.stages.base import CallPlan, DispatchPlan
    from toolq.secretbox import SecretBox


class Seal:
    """Replaces the envelope's arguments by their sealed copy (after the gate read them)."""

    refuses: ClassVar[bool] = True

    def __init__(self, box: SecretBox | None) -> None:
        self.box = box

    def __call__(self, plan: CallPlan, dispatch: DispatchPlan) -> None:
        """Fill in ``plan`` for this stage's question."""
        env = plan.envelope
        env.arguments = seal_arguments(self.box, plan.tool, env.call_id, plan.call.arguments)
