"""``Schedule``: whether a call that will run goes through admission (``Admission.plan``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from toolq.results.store import Scheduled

if TYPE_CHECKING:
    from toolq.dispatch.stages.base import CallPlan, DispatchPlan
    from toolq.results.admission import Admission


class Schedule:
    """Sets the new call's ``schedule`` when its tenant's share or the tool's limits apply."""

    refuses: ClassVar[bool] = False

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def __call__(self, plan: CallPlan, dispatch: DispatchPlan) -> None:
        """Fill in ``plan`` for this stage's question."""
        assert plan.new is not None
        tool = plan.tool
        found = self.admission.plan(tool, plan.envelope.tenant, tool.risk)
        if found is None:
            return
        (backlog, lane), fields = found
        plan.new = dataclasses.replace(plan.new, schedule=Scheduled(backlog, lane, fields))
