"""Refusals of the run-owner checks: REFUSE."""

from __future__ import annotations

from typing import Any

from toolq.keys import Keys
from toolq.results.runner import Invocation, Script


class Refuse(Script[bool]):
    """A refused request counted, and audited if its window allows (``refuse.lua``)."""

    file = "refuse.lua"

    def __call__(
        self,
        *,
        keys: Keys,
        principal: str,
        entry: dict[str, str],
        proof: tuple[str, str],
        window: int,
        per_window: int,
        audit_maxlen: int,
    ) -> Invocation[bool]:
        """An invocation: KEYS and ARGV as the header of ``refuse.lua`` lists them.

        ``entry``: the audit entry's ``call_id``, ``run_id``, ``tool``, ``by``, ``outcome``
        and ``ts``; ``proof``: ``("sig", signature)`` or ``("system", "1")``.
        """
        run_id, call_id = entry["run_id"], entry["call_id"]
        return self.invoke(
            [
                keys.refusals,
                keys.refusal_mark(principal, run_id, call_id),
                keys.refusal_budget(principal),
                keys.audit_stream,
            ],
            [
                window,
                per_window,
                audit_maxlen,
                *(entry[f] for f in ("call_id", "run_id", "tool", "by", "outcome", "ts")),
                *proof,
            ],
        )

    def parse(self, reply: Any) -> bool:
        """True when the refusal was written to the audit stream."""
        return bool(int(reply))


REFUSE = Refuse()
