"""Refusals of the run-owner checks: REFUSE."""

from __future__ import annotations

from typing import Any

from toolq.keys import Keys
from toolq.results.runner import Invocation, Script


class Refuse(Script[bool]):
    """A refused request counted, and audited if its window allows (``refuse.lua``)."""

    file = "refuse.lua"
    includes = ("audit",)

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
        proof_field, proof_value = proof
        return self.invoke(
            keys={
                "counts": keys.refusals,
                "mark": keys.refusal_mark(principal, run_id, call_id),
                "budget": keys.refusal_budget(principal),
                "audit": keys.audit_stream,
                "chain": keys.audit_chain,
            },
            argv={
                "window": window,
                "per_window": per_window,
                "audit_maxlen": audit_maxlen,
                "call_id": call_id,
                "run_id": run_id,
                "tool": entry["tool"],
                "by": entry["by"],
                "outcome": entry["outcome"],
                "ts": entry["ts"],
                "proof_field": proof_field,
                "proof": proof_value,
            },
        )

    def parse(self, reply: Any) -> bool:
        """True when the refusal was written to the audit stream."""
        return bool(int(reply))


REFUSE = Refuse()
