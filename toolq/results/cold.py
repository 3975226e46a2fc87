"""``ColdStore``: where the readers of ``toolq.results`` find calls that left Redis.

With a history store (``Settings.history_url``) a finished call stays in Redis for the hot
window only; after it the ``CallStore`` and ``EventLog`` readers ask the history store
(``toolq.history.HistoryStore``, which the ``Backend`` hands them) for what Redis no longer
holds, so every reader finds a call wherever it is. Nothing here imports the history store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class RunBounds:
    """Which runs a listing shows: one tenant's (``None``: all) last dispatched within."""

    tenant: str | None = None
    since: float | None = None
    until: float | None = None


class ColdStore(Protocol):
    """The reads of the history store the Redis readers fall back on."""

    def records(self, call_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The stored Redis records of those of ``call_ids`` archived, by call id."""
        ...

    def run_call_ids(self, run_id: str, limit: int | None = None) -> list[str]:
        """A run's archived calls, in creation order (the first ``limit`` of them)."""
        ...

    def events(
        self, run_id: str, after: str | None = None, count: int | None = None
    ) -> list[tuple[str, dict[str, str]]]:
        """A run's archived events after ``after``: ``(stream id, fields)``, in order."""
        ...

    def claims(self, idems: Sequence[str]) -> dict[str, tuple[str, str, str]]:
        """Archived calls by the hash of their idempotency key (``Keys.idempotency``).

        By hash: ``(call_id, status, fingerprint claimed with the key)``.
        """
        ...

    def runs(
        self, bounds: RunBounds, after: tuple[float, str] | None, limit: int
    ) -> list[tuple[str, float]]:
        """Runs with archived calls within ``bounds``, newest first: ``(run_id, last dispatch)``."""
        ...

    def runs_total(self, bounds: RunBounds, besides: Sequence[str] = ()) -> int:
        """How many runs ``runs`` lists in all, leaving out those in ``besides``."""
        ...

    def run_last_dispatch(self, run_id: str) -> float | None:
        """The newest creation time among a run's archived calls, or ``None``."""
        ...
