"""The history archiver's script: COOL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolq.keys import Keys
from toolq.quotas import DEFAULT_TENANT
from toolq.results.runner import Invocation, Script


class Cool(Script[tuple[int, bool]]):
    """Archived calls of a run (and the run, once all final) get the hot TTL (``cool.lua``).

    Replies ``(calls cooled, whether the run's keys were)``.
    """

    file = "cool.lua"

    def __call__(
        self,
        *,
        keys: Keys,
        run_id: str,
        call_ids: Sequence[str],
        hot: int,
        idempotency: Sequence[str | None] = (),
        tenant: str = DEFAULT_TENANT,
    ) -> Invocation[tuple[int, bool]]:
        """An invocation: KEYS and ARGV as the header of ``cool.lua`` lists them.

        ``idempotency``: each call's idempotency key (``None``: it has none to cool);
        ``tenant``: the run's, whose runs index it leaves once cooled.
        """
        idems = list(idempotency) or [None] * len(call_ids)
        return self.invoke(
            keys={
                "run_calls": keys.run_calls(run_id),
                "stream": keys.run_stream(run_id),
                "run_owner": keys.run_owner(run_id),
                "run_settings": keys.run_settings(run_id),
                "runs": keys.runs,
                "tenant_runs": keys.tenant_runs(tenant),
            },
            argv={"hot": hot, "call_prefix": keys.call_prefix, "run_id": run_id},
            extra_keys=[
                *(keys.call(c) for c in call_ids),
                *(keys.undo(c) for c in call_ids),
                *(idem or keys.undo(c) for c, idem in zip(call_ids, idems, strict=True)),
            ],
        )

    def parse(self, reply: Any) -> tuple[int, bool]:
        """The typed outcome of a reply."""
        return int(reply[0]), bool(int(reply[1]))


COOL = Cool()
