"""``Admission``: which calls wait in the admission stage, and ADMIT, which lets them go.

A call is scheduled when fair share is on (``Settings.fair_share_on``: by default when
``TOOLQ_TENANTS`` names tenants) or when its tool or its tenant has a concurrency cap or a
rate limit. A scheduled call, once runnable, waits in its tenant's backlog of its risk
(``Keys.backlog``) with its Celery message on its record, and ``admit.lua`` pushes it onto
the risk's queue when its tenant's turn comes and its limits allow (docs:
guide/fair-share.md). Everything else goes straight to its queue, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import redis

from toolq.models import RiskLevel
from toolq.quotas import LimitKind, LimitScope, RateLimit, tenant_config
from toolq.results import scripts
from toolq.results.runner import Invocation
from toolq.results.store import CallStore, dumps

if TYPE_CHECKING:
    from toolq.registry.tool import Tool

log = logging.getLogger("toolq.admission")

Plan = tuple[tuple[str, str], dict[str, str]]
"""``((backlog, lane), record fields)`` of a scheduled call (``Admission.plan``)."""


class Admission:
    """The admission stage over one ``CallStore`` (its Redis client, keys and settings)."""

    def __init__(
        self, store: CallStore, on_due: Callable[[RiskLevel, float], None] | None = None
    ) -> None:
        """``on_due(risk, at)``: told when ADMIT should run again for a full rate limit."""
        self.store = store
        self.on_due = on_due
        self.settings = store.settings
        self.keys = store.keys
        self._plans: dict[tuple[int, str, RiskLevel], Plan | None] = {}
        """``plan``'s answers: a tool's and a tenant's limits are fixed for the process."""

    def limits(self, tool: Tool, tenant: str) -> list[dict[str, Any]]:
        """The limits a call of ``tool`` for ``tenant`` counts against.

        As ``admit.lua`` reads them from the record (lib/sched.lua).
        """
        found: list[dict[str, Any]] = []
        config = tenant_config(self.settings.tenants, tenant)
        sources: tuple[tuple[LimitScope, str, int | None, RateLimit | str | None], ...] = (
            ("tool", tool.name, tool.concurrency, tool.rate_limit),
            ("tenant", tenant, config.concurrency, config.rate_limit),
        )
        for scope, name, concurrency, rate in sources:
            if concurrency is not None:
                found.append(self._limit("concurrency", scope, name, concurrency))
            if rate is not None:
                parsed = RateLimit.parse(rate)
                limit = self._limit("rate_limit", scope, name, parsed.count)
                limit["ms"] = int(parsed.seconds * 1000)
                found.append(limit)
        return found

    def _limit(self, kind: LimitKind, scope: LimitScope, name: str, cap: int) -> dict[str, Any]:
        key = (
            self.keys.slots(scope, name) if kind == "concurrency" else self.keys.starts(scope, name)
        )
        return {"kind": kind, "scope": scope, "name": name, "key": key, "cap": cap}

    def applies(self, tool: Tool | None, tenant: str) -> bool:
        """Whether a call of ``tool`` for ``tenant`` goes through admission (``plan``'s)."""
        if tool is None:
            return self.settings.fair_share_on
        return self.plan(tool, tenant, tool.risk) is not None

    def plan(self, tool: Tool, tenant: str, risk: RiskLevel) -> Plan | None:
        """``((backlog, lane), record fields)`` of a scheduled call; ``None`` for a direct one.

        The fields are shared between calls: copy them before changing them.
        """
        key = (id(tool), tenant, risk)
        if key not in self._plans:
            self._plans[key] = self._plan(tool, tenant, risk)
        return self._plans[key]

    def _plan(self, tool: Tool, tenant: str, risk: RiskLevel) -> Plan | None:
        limits = self.limits(tool, tenant)
        if not (limits or self.settings.fair_share_on):
            return None
        backlog, lane = self.keys.backlog(risk, tenant), self.keys.lane(risk)
        weight = tenant_config(self.settings.tenants, tenant).weight
        fields = {"lane": lane, "backlog": backlog, "weight": repr(weight), "tenant": tenant}
        if limits:
            fields["limits"] = dumps(limits)
        return (backlog, lane), fields

    def admit(self, risks: Iterable[RiskLevel] = tuple(RiskLevel)) -> int:
        """Run ADMIT for each of ``risks`` (one round trip); how many calls it admitted."""
        now_ms = int(time.time() * 1000)
        ordered = list(dict.fromkeys(risks))
        replies = self.store.scripts.pipelined([self.invocation(risk, now_ms) for risk in ordered])
        if self.on_due is not None:
            for risk, reply in zip(ordered, replies, strict=True):
                if reply.due_ms:
                    # The oldest start leaves the window just after due_ms (ADMIT keeps
                    # starts newer than now - window).
                    self.on_due(risk, (reply.due_ms + 1) / 1000)
        return sum(reply.admitted for reply in replies)

    def invocation(
        self, risk: RiskLevel, now_ms: int | None = None
    ) -> Invocation[scripts.AdmitReply]:
        """One ADMIT of ``risk``, to run in a pipeline (``admit``; a dispatch's creates)."""
        return scripts.ADMIT(
            keys=self.keys,
            risk=risk,
            now_ms=int(time.time() * 1000) if now_ms is None else now_ms,
            depth=self.settings.admission_depth,
            hold_ms=int(self.settings.admission_hold * 1000),
            window=self.settings.admission_window,
            maxlen=self.settings.stream_maxlen,
        )

    def admit_soon(self, risks: Iterable[RiskLevel]) -> None:
        """``admit``, after a write that already succeeded: a failure is only logged.

        The calls are in their backlogs; the sweeper's next pass admits them.
        """
        try:
            self.admit(risks)
        except redis.RedisError as exc:
            log.info("admission failed (the sweeper admits): %s", exc)
