"""Each Lua script run straight through its wrapper against the suite's private Redis."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from toolq.keys import Keys
from toolq.results import scripts
from toolq.results.runner import Scripts

KEYS = Keys("t13")
QUEUE = "t13:queue:safe"
MESSAGE = '{"body": "x", "properties": {"delivery_tag": "tag-1"}}'


@pytest.fixture
def lua(r: redis.Redis) -> Iterator[Scripts]:
    runner = Scripts(r)
    yield runner
    runner.close()


def now() -> str:
    return repr(time.time())


def create(
    lua: Scripts,
    call_id: str = "c1",
    *,
    run_id: str = "run1",
    status: str = "queued",
    message: tuple[str, str] | None = (QUEUE, MESSAGE),
    owner: str = "alice",
    admin: bool = False,
    idempotent: bool = False,
    timeout: str = "",
    deadline: float = 0,
    key: str | None = None,
    fields: dict[str, str] | None = None,
    refresh: bool = True,
    fingerprint: str = "",
    grouped: bool = False,
    notify: str = "",
) -> scripts.CreateReply:
    """A call created with CREATE, as dispatch creates one (the dispatch's last by default).

    ``grouped``: a member of a CREATE_GROUP group (give ``message=None``).
    """
    return lua.run(
        scripts.CREATE(
            keys=KEYS,
            idempotency=KEYS.idempotency(owner, run_id, key or call_id),
            call_id=call_id,
            run_id=run_id,
            status=status,
            envelope=f'{{"call_id": "{call_id}"}}',
            etype="call.queued" if status == "queued" else "call.awaiting_approval",
            data=json.dumps({"status": status}),
            maxlen=1000,
            ttl=3600,
            now=now(),
            deadline=repr(deadline),
            name="echo",
            risk="safe",
            idempotent=idempotent,
            timeout=timeout,
            result="",
            message=message if status == "queued" else None,
            owner=owner,
            admin=admin,
            refresh=refresh,
            tenant="default",
            fields=fields,
            fingerprint=fingerprint,
            grouped=grouped,
            notify=notify,
        )
    )


def start(lua: Scripts, call_id: str = "c1", token: str = "tok", run_id: str = "run1", **kw: Any):
    return lua.direct(
        scripts.START(
            keys=KEYS,
            call_id=call_id,
            run_id=run_id,
            token=token,
            lease_ms=kw.get("lease_ms", 10_000),
            now=now(),
            maxlen=1000,
            cancel_result='{"error_type": "cancelled"}',
            now_ms=int(time.time() * 1000),
        )
    )


def record(r: redis.Redis, call_id: str = "c1") -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(KEYS.call(call_id)).items()}


def events(r: redis.Redis, run_id: str = "run1") -> list[str]:
    return [f[b"type"].decode() for _, f in r.xrange(KEYS.run_stream(run_id))]
