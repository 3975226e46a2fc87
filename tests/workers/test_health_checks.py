"""The reasons ``/healthz`` and ``toolq check`` give, from Redis's own error replies.

OOM and READONLY are provoked on a real server in ``tests/e2e/test_health.py``; the other
replies (a failed RDB save, too few replicas, an ACL refusal) are parsed here by redis-py's
own reply parser, exactly as a client receives them.
"""

from __future__ import annotations

import json

import pytest
from redis._parsers.base import BaseParser

from toolq.workers.health import LOST_NOTICE_SECONDS, lost_checks, write_check

REPLIES = {
    "OOM command not allowed when used memory > 'maxmemory'.": "redis_oom",
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist "
    "to disk. Commands that may modify the data set are disabled": "redis_misconf",
    "READONLY You can't write against a read only replica.": "redis_readonly",
    "NOREPLICAS Not enough good replicas to write.": "redis_noreplicas",
    "NOPERM User toolq-api has no permissions to access the 'toolq:x' key": "redis_noperm",
    "ERR something else": "redis_write_refused",
}


@pytest.mark.parametrize(("reply", "code"), REPLIES.items())
def test_each_refused_write_is_named_with_a_fix(reply: str, code: str) -> None:
    check = write_check(BaseParser.parse_error(reply), "redis://redis.example:6380/0")
    assert (check.ok, check.code) == (False, code)
    assert check.fix and "redis://redis.example:6380/0" in check.reason


def test_a_worker_is_lost_only_without_heartbeat_and_only_for_a_while() -> None:
    entry = json.dumps({"at": 1000.0, "ttl": 15, "queues": ["toolq.safe"]})
    seen = {"w1@h": entry, "w2@h": entry}
    [lost] = lost_checks(seen, alive={"w2@h"}, now=1100.0)
    assert lost.code == "worker_lost" and "w1@h (toolq.safe)" in lost.reason
    assert "100s ago" in lost.reason  # its last heartbeat, at 1000 (lapsed at 1015)
    assert lost_checks(seen, alive=set(), now=1015.0 + LOST_NOTICE_SECONDS + 1) == []
