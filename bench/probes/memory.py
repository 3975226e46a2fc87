"""What finished calls leave in Redis: every key, grouped by the shape of its name.

Ids in key names (32+ hex digits, ``call_…``/``run_…`` tokens, UUIDs) become ``{id}``, so
``toolq:call:9f…`` and ``toolq:call:3c…`` count as one kind. Sizes are ``MEMORY USAGE key
SAMPLES 0`` (exact, with Redis's per-key overhead).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import redis

_ID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{16,}"
    r"|(?:call|run|toolu|fc)_[A-Za-z0-9_-]+"
)


def shape(key: str) -> str:
    """``key`` with its ids replaced by ``{id}``."""
    return _ID.sub("{id}", key)


def key_kinds(client: redis.Redis, prefix: str = "") -> list[dict[str, Any]]:
    """Each kind of key (under ``prefix``): type, count, total and mean bytes; largest first."""
    kinds: dict[tuple[str, str], list[int]] = defaultdict(list)
    keys = [k.decode() if isinstance(k, bytes) else k for k in client.scan_iter(count=1000)]
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
        pipe.memory_usage(key, samples=0)
    answers = pipe.execute()
    for i, key in enumerate(keys):
        if not key.startswith(prefix):
            continue
        kind = answers[2 * i]
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind == "none":  # gone between SCAN and TYPE (e.g. kombu's transient keys)
            continue
        kinds[(shape(key), kind)].append(int(answers[2 * i + 1] or 0))
    out = [
        {
            "key": name,
            "type": kind,
            "keys": len(sizes),
            "bytes": sum(sizes),
            "bytes_per_key": sum(sizes) / len(sizes),
        }
        for (name, kind), sizes in kinds.items()
    ]
    return sorted(out, key=lambda row: -row["bytes"])


def run_keys(client: redis.Redis, run_id: str) -> list[dict[str, Any]]:
    """The keys of one run (``*{run_id}*``): name shape, type, bytes."""
    out = []
    for key in client.scan_iter(match=f"*{run_id}*", count=1000):
        name = key.decode() if isinstance(key, bytes) else key
        out.append(
            {
                "key": name.replace(run_id, "{run}"),
                "type": client.type(name).decode(),  # type: ignore[union-attr]
                "bytes": int(client.memory_usage(name, samples=0) or 0),
            }
        )
    return out


def call_hash(client: redis.Redis, key: str) -> dict[str, Any]:
    """One call record: its encoding, size, and the length of each field's value."""
    fields = client.hgetall(key)
    enc = client.object("encoding", key)
    return {
        "key": shape(key),
        "encoding": enc.decode() if isinstance(enc, bytes) else str(enc),
        "bytes": int(client.memory_usage(key, samples=0) or 0),
        "fields": {
            (k.decode() if isinstance(k, bytes) else str(k)): len(v) for k, v in fields.items()
        },
        "listpack_limits": {k: v for k, v in client.config_get("hash-max-listpack-*").items()},
    }
