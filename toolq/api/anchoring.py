"""``AuditAnchors``: the API signs the audit chain's head periodically (each cell's stream).

A chain recomputed by a Redis writer then no longer matches the last signed anchor, which
``toolq verify-audit`` reports. Only a process holding the signing key anchors; a stream
whose newest entry is an anchor already is left alone, so several API replicas do not
anchor each other's anchors.
"""

from __future__ import annotations

import asyncio
import logging

import redis
from starlette.concurrency import run_in_threadpool

from toolq.approvals.audit import anchor_head
from toolq.backend import Backend
from toolq.dispatch.client import Client
from toolq.results.audit_log import AuditLog
from toolq.signing import signer_for

log = logging.getLogger("toolq.api")

BY = "api"
"""Who the anchors name."""


class AuditAnchors:
    """A background task of the API's lifespan; nothing runs without a signing key."""

    def __init__(self, client: Client) -> None:
        settings = client.settings
        self.signer = signer_for(settings)
        self.interval = settings.audit_anchor_interval
        backends: list[Backend] = [one.backend for one in client.cell_clients]
        self.logs = [
            AuditLog(b.redis, b.keys, b.settings.audit_maxlen, b.store.scripts) for b in backends
        ]
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start anchoring every ``audit_anchor_interval`` seconds (if there is a key)."""
        if self.signer is not None and self.interval > 0:
            self.task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop the task."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    def anchor_once(self) -> None:
        """Anchor each stream whose newest entry is not an anchor; a failing Redis is logged."""
        assert self.signer is not None
        for audit_log in self.logs:
            try:
                anchor_head(audit_log, self.signer, BY, again=False)
            except redis.RedisError as exc:
                log.warning("could not anchor the audit chain: %s", exc)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await run_in_threadpool(self.anchor_once)
