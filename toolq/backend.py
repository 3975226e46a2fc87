"""``Backend``: the connections and stores of one process, wired once from settings.

``Client`` (and ``AsyncClient`` through it), ``WorkerRuntime``, ``Maintenance`` (its webhook
deliverer too), the API and the CLI take what they use from a ``Backend`` instead of each
building a Redis client, ``Keys`` and the stores over it; the dispatcher and the approval
store share its ``RunOwners``. Stores are made on first use, so a command that only reads
events builds no Celery app and registers no approval scripts.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import redis
from celery import Celery

from toolq.approvals.policy import ApprovalPolicy
from toolq.approvals.store import ApprovalStore
from toolq.broker import Publisher, celery_app
from toolq.keys import Keys
from toolq.registry.registry import ToolRegistry
from toolq.results.connection import redis_client as connect
from toolq.results.events import EventLog
from toolq.results.owners import RunOwners
from toolq.results.store import CallStore
from toolq.results.undos import UndoStore
from toolq.settings import Settings

if TYPE_CHECKING:
    from toolq.history.store import HistoryStore


class Backend:
    """One process's Redis connection, key names, stores and publisher.

    ``redis_client`` replaces the retrying client built from ``settings`` (its Sentinels or URL);
    ``celery`` the app messages are encoded and sent with (default: ``celery_app``; a
    worker passes its own); ``max_connections`` bounds the client's pool (callers wait for a
    free connection), as a ``Client`` does. ``close`` closes the Redis client and the Celery app.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        registry: ToolRegistry | None = None,
        *,
        redis_client: redis.Redis | None = None,
        celery: Celery | None = None,
        max_connections: int | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.registry = registry if registry is not None else ToolRegistry()
        self.keys = Keys(self.settings.key_prefix)
        self.redis = redis_client or connect(self.settings, max_connections)
        if celery is not None:
            self.celery = celery

    @cached_property
    def store(self) -> CallStore:
        """Call records and their scripts."""
        store = CallStore(self.redis, self.settings)
        store.cold = self.history
        return store

    @cached_property
    def log(self) -> EventLog:
        """Runs' event streams."""
        log = EventLog(self.redis, self.keys)
        log.cold = self.history
        log.acks = self.store.acks
        return log

    @cached_property
    def history(self) -> HistoryStore | None:
        """The history store (``Settings.history_url``), or ``None`` without one.

        Opening it creates the archive stream and its group, so from then on every call
        made final is archived (``toolq.history.archiver``).
        """
        if not self.settings.history_url:
            return None
        from toolq.history.archiver import ensure_group
        from toolq.history.store import HistoryStore

        ensure_group(self.redis, self.keys)
        return HistoryStore(self.settings.history_url)

    @cached_property
    def undos(self) -> UndoStore:
        """Calls' undos."""
        return UndoStore(self.store)

    @cached_property
    def owners(self) -> RunOwners:
        """Who owns each run."""
        owners = RunOwners(self.redis, self.keys, self.settings)
        owners.cold = self.history
        return owners

    @cached_property
    def policy(self) -> ApprovalPolicy:
        """Per-run approval rules."""
        return ApprovalPolicy(self.redis, self.keys, self.settings)

    @cached_property
    def celery(self) -> Celery:
        """The Celery app that encodes and sends messages (no tasks in it)."""
        return celery_app(self.settings)

    @cached_property
    def publisher(self) -> Publisher:
        """Encodes and sends call, undo and preview messages."""
        return Publisher(self.celery, self.settings)

    @cached_property
    def approvals(self) -> ApprovalStore:
        """Parked calls and their decisions."""
        return ApprovalStore(
            self.store, self.publisher, self.registry, self.policy, owners=self.owners
        )

    def close(self) -> None:
        """Release the Redis connections and the Celery app's, if one was made."""
        if "log" in self.__dict__:
            self.log.close()
        if self.__dict__.get("history") is not None:
            self.__dict__["history"].close()
        self.redis.close()
        if "celery" in self.__dict__:
            self.celery.close()
