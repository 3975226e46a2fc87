"""``ReplicaAcks``: writes that accept or decide work wait for replicas before they count.

With ``TOOLQ_MIN_REPLICAS_ACK`` ≥ 1, the pipeline (or connection) that runs such a write
also sends ``SET <mark>`` and ``WAIT n timeout``; fewer than ``n`` replicas in time is a
``ReplicationError``. ``WAIT`` does not undo the write on the master: the caller is told it
was not acknowledged, and repeating it with the same ids is safe (every such write is an
idempotent claim or a compare-and-set). Readers fence the other way
(``CallStore.confirmed_results``: the records, the mark and ``WAIT`` in one pipeline on one
connection): a final state they read is reported only once the replicas hold it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolq.errors import ReplicationError
from toolq.keys import Keys
from toolq.settings import Settings


class ReplicaAcks:
    """The ``WAIT`` a write needs under ``settings`` (nothing when ``min_replicas_ack`` is 0)."""

    def __init__(self, settings: Settings, keys: Keys) -> None:
        self.replicas = settings.min_replicas_ack
        self.timeout_ms = settings.replica_ack_timeout_ms
        self.mark = keys.replication_mark

    @property
    def enabled(self) -> bool:
        """True when writes wait for replicas."""
        return self.replicas > 0

    def commands(self) -> list[tuple[Any, ...]]:
        """The commands sent after the write on its connection: the mark, then ``WAIT``."""
        if not self.enabled:
            return []
        return [("SET", self.mark, "1"), ("WAIT", self.replicas, self.timeout_ms)]

    def fence(self, pipe: Any) -> bool:
        """Append the mark and ``WAIT`` to ``pipe``, after the reads they vouch for.

        ``held`` then tells from the pipeline's replies whether the replicas hold what it
        read. False (nothing appended) when ``min_replicas_ack`` is 0.
        """
        for command in self.commands():
            pipe.execute_command(*command)
        return self.enabled

    def held(self, replies: Sequence[Any]) -> bool:
        """Whether the replicas acknowledged a fenced pipeline (its last reply, ``WAIT``'s)."""
        return not self.enabled or int(replies[-1]) >= self.replicas

    def unconfirmed(self, what: str, replies: Sequence[Any]) -> ReplicationError:
        """The error of a fenced read (``replies``) whose final state was not confirmed."""
        return ReplicationError(
            f"{what} is final on the master, but {int(replies[-1])} of {self.replicas} "
            f"replicas hold it after {self.timeout_ms} ms (TOOLQ_MIN_REPLICAS_ACK): not "
            "reported, as a failover could take it back; read again shortly",
            replicas=int(replies[-1]),
            required=self.replicas,
        )

    def check(self, acked: Any, what: str) -> None:
        """Raise ``ReplicationError`` unless ``acked`` (``WAIT``'s reply) is enough."""
        if not self.enabled:
            return
        count = int(acked)
        if count < self.replicas:
            raise ReplicationError(
                f"{what} reached {count} of {self.replicas} replicas within "
                f"{self.timeout_ms} ms (TOOLQ_MIN_REPLICAS_ACK): not acknowledged; "
                "retrying with the same ids is safe",
                replicas=count,
                required=self.replicas,
            )
