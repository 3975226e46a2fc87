"""``Backend``: one wiring of connections and stores, shared by what is built from it."""

from __future__ import annotations

import pytest
import redis

from tests.apps import registry
from toolq import Backend, Client, Settings, ToolRegistry
from toolq.errors import ConfigurationError


def test_stores_are_made_once_and_on_first_use(r: redis.Redis, settings: Settings) -> None:
    backend = Backend(settings, registry)
    try:
        assert backend.log.read("no-such-run") == []
        # Reading events made no Celery app and no approval store.
        assert "celery" not in backend.__dict__ and "approvals" not in backend.__dict__
        assert backend.approvals is backend.approvals
        assert backend.approvals.store is backend.store
        assert backend.approvals.publisher is backend.publisher
        assert backend.publisher.app is backend.celery
        assert backend.store.redis is backend.redis
    finally:
        backend.close()


def test_clients_share_a_backend(r: redis.Redis, settings: Settings) -> None:
    backend = Backend(settings, registry)
    first, second = Client(registry, backend=backend), Client(registry, backend=backend)
    try:
        batch = first.dispatch([{"id": "a", "name": "wipe", "arguments": {"target": "t"}}])
        assert second.store is first.store and second.redis is first.redis
        # Parked (dangerous), so it needs no worker: seen through the other client.
        [pending] = second.approvals.pending(run_id=batch.run_id)
        assert pending.call_id == batch.call_ids[0]
    finally:
        first.close()


def test_a_client_refuses_a_backend_of_another_registry(settings: Settings) -> None:
    backend = Backend(settings, ToolRegistry())
    try:
        with pytest.raises(ConfigurationError):
            Client(registry, backend=backend)
    finally:
        backend.close()
