"""Fixtures for signed approvals: a key pair per test, a deciding client, verifying workers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.conftest import InProcess, make_settings
from toolq import Client
from toolq.approvals.policy import digest_call
from toolq.models import RiskLevel
from toolq.signing import generate_pair


class Pair:
    def __init__(self) -> None:
        self.signing, self.verify = generate_pair()


@pytest.fixture
def pair() -> Pair:
    return Pair()


def deciding_client(pair: Pair, **overrides: Any) -> Client:
    from tests.apps import registry

    return Client(registry, make_settings(approval_signing_key=pair.signing, **overrides))


@pytest.fixture
def approver(pair: Pair, r: redis.Redis) -> Iterator[Client]:
    """A client holding the signing key (what the API, CLI or an approver's process is)."""
    with deciding_client(pair) as c:
        yield c


def start_verifying(inproc: InProcess, verify: str, **overrides: object) -> None:
    """An in-process worker that verifies approvals with ``verify`` (``Settings`` overrides)."""
    inproc.start(approval_verify_keys=verify, **overrides)


def executions(r: redis.Redis, call_id: str) -> int:
    """How many times a test tool's handler ran for this call (tests/apps.py records it)."""
    return int(r.llen(f"test:exec:{call_id}"))


def forge_queued(
    r: redis.Redis,
    client: Client,
    call_id: str,
    arguments: dict[str, Any] | None = None,
    approval: str | None = None,
) -> None:
    """What a Redis writer can do: mark a parked call queued (with its own arguments), take
    it off the pending set, put it in the re-send set and push a Celery message for it."""
    key = f"toolq:call:{call_id}"
    envelope = json.loads(r.hget(key, "envelope"))
    if arguments is not None:
        envelope["arguments"] = arguments
    fields = {
        "status": "queued",
        "envelope": json.dumps(envelope),
        "digest": digest_call(envelope["name"], envelope["arguments"]),
    }
    if approval is not None:
        fields["approval"] = approval
    r.hset(key, mapping=fields)
    r.zrem("toolq:approvals:pending", call_id)
    r.zadd("toolq:unsent", {call_id: time.time()})
    queue, message = client.publisher.message(
        call_id, RiskLevel.parse(envelope["risk"]), None, envelope["run_id"]
    )
    r.lpush(queue, message)


def audit_outcomes(r: redis.Redis) -> list[tuple[str, str, str]]:
    """(call_id, by, outcome) of every audit entry."""
    return [
        (f[b"call_id"].decode(), f[b"by"].decode(), f[b"outcome"].decode())
        for _, f in r.xrange("toolq:audit")
    ]
