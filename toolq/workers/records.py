"""Typed reads of the call record fields a worker looks at besides its START reply.

Each view is a frozen dataclass whose field names are the record's: one ``HMGET`` reads
them all, decoded, ``None`` where the record has no such field (or no record).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import redis

from toolq.keys import Keys

V = TypeVar("V")


@dataclass(frozen=True)
class Gate:
    """What a started call needs before its handler runs, when it is gated or a re-run."""

    approval: str | None
    """The signed approval (or rule) a gated call carries."""
    resolution: str | None
    """The signed re-run resolution of a non-idempotent call started before and lost."""


@dataclass(frozen=True)
class UndoGate:
    """What a gated call's undo needs before its handler runs."""

    approval: str | None
    """The call's own signed approval (or rule): only an approved call's effect is undone."""
    undo_approval: str | None
    """A person's signed approval of this undo (``toolq.approvals.undoing``)."""


@dataclass(frozen=True)
class Decision:
    """Who was asked and who decided a parked call (the approval wait of its trace)."""

    approvers: str | None
    decided_by: str | None


@dataclass(frozen=True)
class Kind:
    """The tool a call names (``async def`` or not, by the registry)."""

    name: str | None


class Records:
    """Reads typed views of call records."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def read(self, call_id: str, view: type[V]) -> V:
        """The ``view`` of one call's record (one round trip)."""
        return self.read_many([call_id], view)[0]

    def read_many(self, call_ids: Sequence[str], view: type[V]) -> list[V]:
        """The ``view`` of each call's record, in one round trip."""
        names = [f.name for f in fields(view)]  # type: ignore[arg-type]
        pipe = self.redis.pipeline(transaction=False)
        for call_id in call_ids:
            pipe.hmget(self.keys.call(call_id), names)
        return [view(*map(_text, values)) for values in pipe.execute()]


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
