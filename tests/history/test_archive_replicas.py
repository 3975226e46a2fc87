"""``toolq history archive --once`` under TOOLQ_MIN_REPLICAS_ACK.

The replicas do not confirm what the archiver read (here: the private Redis has none):
the batch is not written, and ``--once`` says so and exits 1, as for a Redis outage (a
reviewer found it said "archived 0 call(s)" and exited 0, as if nothing waited).
"""

from __future__ import annotations

import pytest

from tests.cli.test_approve import toolq
from toolq import Client

pytestmark = pytest.mark.e2e


def test_archive_once_says_when_the_replicas_keep_it_from_archiving(settings, r, tmp_path):
    from tests.apps import registry

    url = f"sqlite:///{tmp_path}/history.db"
    env = {"TOOLQ_HISTORY_URL": url}
    assert toolq("history", "upgrade", settings=settings, **env).returncode == 0
    # the group exists before the call is final (workers or the archiver create it)
    first = toolq("history", "archive", "--once", settings=settings, **env)
    assert first.returncode == 0, first.stderr
    with Client(registry, settings) as client:
        batch = client.dispatch([{"id": "n", "name": "nope", "arguments": {}}], run_id="h")
        assert batch.calls[0].status.value == "failed"  # final at once (unknown tool)
    fenced = {**env, "TOOLQ_MIN_REPLICAS_ACK": "1", "TOOLQ_REPLICA_ACK_TIMEOUT_MS": "200"}
    got = toolq("history", "archive", "--once", settings=settings, **fenced)
    assert got.returncode == 1, (got.stdout, got.stderr)
    assert "waiting for Redis's replicas" in got.stderr and "0 of 1" in got.stderr, got.stderr
