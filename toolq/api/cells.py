"""The API's parts that live beside one Redis, one per cell: event hubs and ticket stores.

Without ``TOOLQ_SHARDS`` there is one of each, over the process's Redis. With cells, a
run's event stream is read by its cell's hub and its event tickets are kept in its cell,
so a cell that is down takes only its own runs' streams with it.
"""

from __future__ import annotations

from dataclasses import replace

import redis
from fastapi.responses import JSONResponse

from toolq.api.tickets import TicketStore
from toolq.dispatch.client import Client
from toolq.errors import OverloadedError, RedisUnavailableError
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.results.connection import RedisTarget
from toolq.results.hub import RETRY_AFTER_SECONDS, EventHub
from toolq.settings import Settings
from toolq.workers.health import Check, run_checks


class CellParts:
    """An ``EventHub`` and a ``TicketStore`` per cell; ``for_run`` picks a run's."""

    def __init__(self, client: Client, settings: Settings) -> None:
        self.client = client
        self.max_streams = settings.max_event_streams
        cells = client.cell_clients
        self.clients = cells
        self.hubs = [
            EventHub(RedisTarget.of(c.settings), c.keys, settings.max_event_streams) for c in cells
        ]
        self.tickets = [TicketStore(c.redis, c.keys, settings.event_ticket_seconds) for c in cells]
        for hub, cell in zip(self.hubs, cells, strict=True):
            hub.cold = cell.backend.history
            hub.acks = cell.store.acks

    def _index(self, run_id: str) -> int:
        held = self.client.cell_for_run(run_id)
        return next(i for i, one in enumerate(self.clients) if one is held)

    def hub_for(self, run_id: str) -> EventHub:
        """The hub of the run's cell (``CellUnavailableError`` when it is down)."""
        return self.hubs[self._index(run_id)]

    def tickets_for(self, run_id: str) -> TicketStore:
        """The ticket store of the run's cell."""
        return self.tickets[self._index(run_id)]

    @property
    def ttl(self) -> float:
        """How long a ticket is valid (seconds)."""
        return self.tickets[0].ttl

    @property
    def streams(self) -> int:
        """Event streams this process serves, over every cell."""
        return sum(h.streams for h in self.hubs)

    def check_capacity(self) -> None:
        """Raise ``OverloadedError`` when ``max_event_streams`` streams are open in all."""
        if self.streams >= self.max_streams:
            raise OverloadedError(
                f"this API process serves {self.max_streams} event streams already; retry later",
                retry_after=RETRY_AFTER_SECONDS,
            )

    def drain(self) -> None:
        """End every event stream within about a second (the server is shutting down)."""
        for hub in self.hubs:
            hub.draining = True

    async def close(self) -> None:
        """Close every hub."""
        for hub in self.hubs:
            await hub.close()


def needed_queues(client: Client) -> list[str]:
    """The queues of the registry's risk levels: each needs a live worker."""
    levels = {tool.risk for tool in client.registry.list()}
    keys = Keys(client.settings.key_prefix)  # every cell's queues have the same names
    return [keys.queue_for(level) for level in RiskLevel if level in levels]


def health_response(checks: list[Check], **extra: object) -> JSONResponse:
    """``/healthz`` with Redis answering: 200, ``ok`` or ``degraded`` with every check."""
    status = "ok" if all(c.ok for c in checks) else "degraded"
    body = {"status": status, **extra, "checks": [c.as_json() for c in checks]}
    return JSONResponse(body)


def unreachable(exc: RedisUnavailableError) -> JSONResponse:
    """``/healthz`` while Redis does not answer: 503."""
    check = Check(
        "redis",
        False,
        exc.code,
        exc.message,
        "start Redis (same data directory) or fix TOOLQ_REDIS_URL; toolq check names the URL",
    )
    body = {
        "status": "unhealthy",
        "redis": exc.message,
        "code": exc.code,
        "checks": [check.as_json()],
    }
    return JSONResponse(body, status_code=503)


def cells_health(client: Client, queues: list[str]) -> JSONResponse:
    """``/healthz`` with cells: each cell up or down; 200 while one answers, else 503.

    ``status`` is ``ok`` (every cell answers and passes its checks), ``degraded`` (some
    do not answer: their runs fail with ``cell_unavailable``, the others' go on; or a
    cell's check fails) or ``unhealthy`` (none answers).
    """
    states = client.cell_states()
    up = [s for s in states if s.up]
    cells = [{"cell": s.index, "where": s.where, "up": s.up} for s in states]
    checks: list[Check] = []
    for cell in up:
        one = client.cell_clients[cell.index]
        try:
            found = run_checks(one.redis, one.keys, queues, cell.where)
        except (redis.RedisError, OSError):
            continue  # went down since: shown down next time
        checks += [replace(c, name=f"cell {cell.index}: {c.name}") for c in found]
    every_ok = len(up) == len(states) and all(c.ok for c in checks)
    status = "ok" if every_ok else "degraded" if up else "unhealthy"
    body = {"status": status, "cells": cells, "checks": [c.as_json() for c in checks]}
    return JSONResponse(body, status_code=503 if not up else 200)
