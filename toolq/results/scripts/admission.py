"""The admission stage's script: ADMIT (``admit.lua``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.results.runner import Invocation, Script, emit_keys


@dataclass(frozen=True)
class AdmitReply:
    """How many calls one ADMIT pushed, how many it found over a limit, and when to run again."""

    admitted: int
    throttled: int
    due_ms: int = 0
    """When the first full rate limit it met frees a start (ms since the epoch); 0: none."""


class Admit(Script[AdmitReply]):
    """Calls of one risk from their tenants' backlogs to its queue, fairly (``admit.lua``)."""

    file = "admit.lua"
    includes = ("emit", "push", "sched")

    def __call__(
        self,
        *,
        keys: Keys,
        risk: RiskLevel,
        now_ms: int,
        depth: int,
        hold_ms: int,
        window: int,
        maxlen: int,
    ) -> Invocation[AdmitReply]:
        """An invocation: KEYS and ARGV as the header of ``admit.lua`` lists them."""
        queue = keys.queue_for(risk)
        before, after = keys.run_stream_parts
        return self.invoke(
            keys={
                "lane": keys.lane(risk),
                "queue": queue,
                "pushes": keys.queue_pushes(queue),
                "queued": keys.queued,
                **emit_keys(keys),
            },
            argv={
                "now": repr(now_ms / 1000),
                "now_ms": now_ms,
                "depth": depth,
                "hold_ms": hold_ms,
                "window": window,
                "maxlen": maxlen,
                "call_prefix": keys.call_prefix,
                "stream_prefix": before,
                "stream_suffix": after,
            },
        )

    def parse(self, reply: Any) -> AdmitReply:
        """The typed outcome of a reply."""
        return AdmitReply(int(reply[0]), int(reply[1]), int(reply[2]))


ADMIT = Admit()
