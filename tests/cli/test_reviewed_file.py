"""``toolq approvals approve --run RUN --reviewed FILE`` against hostile files.

Each test hands the CLI a hostile ``--reviewed`` file (a reviewer's attacks; each got
through before): a usage error (exit 2), nothing approved.
"""

from __future__ import annotations

import json

import pytest

from tests.api.test_approval_pages import park
from tests.cli.test_cli import toolq
from toolq.signing import generate_pair

pytestmark = pytest.mark.e2e

APP = ("--app", "tests.apps:registry")


def test_a_deeply_nested_reviewed_file_is_a_usage_error_not_a_traceback(settings, client):
    """``--reviewed`` holding a JSON list nested 100,000 deep: json.loads raises
    RecursionError, which ``_shown`` does not catch (OSError, ValueError, TypeError): a
    Python traceback and exit 1 instead of the usage error (exit 2) every other malformed
    file gets."""
    park(client, 1, run_id="r-deep-file", tool="purge")
    signing, _ = generate_pair()
    done = toolq(
        "approvals",
        "approve",
        "--run",
        "r-deep-file",
        "--by",
        "bob",
        "--reviewed",
        "-",
        *APP,
        settings=settings,
        stdin="[" * 100_000 + "]" * 100_000,
        TOOLQ_APPROVAL_SIGNING_KEY=signing,
    )
    assert "Traceback" not in done.stderr, done.stderr[-600:]
    assert done.returncode == 2, done.stderr[-600:]
    assert "--reviewed" in done.stderr


def test_a_call_listed_twice_is_not_counted_twice(settings, client, r):
    """The file lists one call twice, as ``purge`` and as ``hurry`` (the same call renamed by
    a Redis writer after the first listing, each with its digest). The CLI keeps the last
    digest (a dict), approves the call once (as ``hurry``) and prints two lines,
    ``approved <id>  purge`` and ``approved <id>  hurry``, then ``2 approved``: it reports
    approving the call as ``purge``, which it did not, and one call as two. A file naming
    a call twice should be refused (usage error), nothing approved."""
    [call_id] = park(client, 1, run_id="r-dup", tool="purge")
    signing, _ = generate_pair()
    first = json.loads(
        toolq("approvals", "list", "--run-id", "r-dup", "--json", settings=settings).stdout
    )
    key = f"toolq:call:{call_id}"
    envelope = json.loads(r.hget(key, "envelope"))
    envelope["name"] = "hurry"
    r.hset(key, mapping={"envelope": json.dumps(envelope), "name": "hurry"})
    second = json.loads(
        toolq("approvals", "list", "--run-id", "r-dup", "--json", settings=settings).stdout
    )
    assert [c["name"] for c in first + second] == ["purge", "hurry"]
    done = toolq(
        "approvals",
        "approve",
        "--run",
        "r-dup",
        "--by",
        "bob",
        "--reviewed",
        "-",
        *APP,
        settings=settings,
        stdin=json.dumps(first + second),
        TOOLQ_APPROVAL_SIGNING_KEY=signing,
    )
    assert f"approved {call_id}  purge" not in done.stdout, done.stdout
    assert "2 approved" not in done.stdout, done.stdout
    assert done.returncode == 2, done.stdout + done.stderr
    assert client.result(call_id).status.value == "awaiting_approval"
