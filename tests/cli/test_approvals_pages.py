"""``toolq approvals list`` a page at a time: ``--limit``, ``--cursor``, the next cursor."""

from __future__ import annotations

import json

from tests.api.test_approval_pages import park
from tests.cli.test_cli import toolq


def test_approvals_list_pages_with_limit_and_cursor(settings, client):
    parked = park(client, 5, run_id="cli-pages")
    first = toolq("approvals", "list", "--limit", "3", settings=settings)
    assert first.returncode == 0, first.stderr
    assert [c for c in parked if c in first.stdout] == parked[:3]
    assert "showing 3 of 5; next page: --cursor " in first.stdout
    cursor = first.stdout.strip().rsplit("--cursor ", 1)[1]
    rest = toolq("approvals", "list", "--json", "--cursor", cursor, settings=settings)
    assert [r["call_id"] for r in json.loads(rest.stdout)] == parked[3:]
    assert "--cursor" not in rest.stderr  # the last page
    bad = toolq("approvals", "list", "--cursor", "garbage", "--limit", "1", settings=settings)
    assert bad.returncode == 1 and "invalid cursor" in bad.stderr
