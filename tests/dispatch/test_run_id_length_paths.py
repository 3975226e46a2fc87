"""The 256-character run id limit: runs that exist already, and paths that create a run
without ``Dispatcher._dispatch``."""

from __future__ import annotations

import pytest

from toolq.errors import PayloadError
from toolq.results import owners

CALL = [{"id": "c1", "name": "echo", "arguments": {"text": "x"}}]
LONG = "r" * 300
"""A run id an existing deployment may hold (no limit before today's change)."""


def _existing_run(client, monkeypatch) -> str:
    """A run created before the limit (dispatched with the old, unlimited code)."""
    monkeypatch.setattr(owners, "MAX_RUN_ID_CHARS", 10_000)
    batch = client.dispatch(CALL, run_id=LONG, principal="agent")
    monkeypatch.undo()
    return batch.call_ids[0]


def test_an_existing_run_with_a_long_id_can_still_be_continued(client, monkeypatch):
    _existing_run(client, monkeypatch)
    assert client.redis.exists(client.keys.run_owner(LONG))
    more = client.dispatch(
        [{"id": "c2", "name": "echo", "arguments": {"text": "y"}}], run_id=LONG, principal="agent"
    )
    assert more.run_id == LONG


def test_a_call_of_an_existing_long_run_can_still_be_retried(client, monkeypatch):
    call_id = _existing_run(client, monkeypatch)
    client.cancel(call_id, principal="agent")
    retried = client.retry(call_id, principal="agent")
    assert retried.run_id == LONG and retried.retry_of == call_id


def test_setting_rules_does_not_create_a_run_the_dispatcher_would_refuse(client):
    # set_rules claims a run not created yet (its owner, its settings), with no length check
    with pytest.raises(PayloadError):
        client.approvals.set_rules(LONG, approval_timeout=60, principal="agent")
    assert not client.redis.exists(client.keys.run_owner(LONG))


@pytest.mark.parametrize("odd", ["r\nforged", "r\u202eevil"])
def test_setting_rules_does_not_create_a_run_whose_id_holds_a_control_character(client, odd):
    # the same claim, for the characters a new run's id refuses (not only its length)
    with pytest.raises(PayloadError, match="control or format characters"):
        client.approvals.set_rules(odd, approval_timeout=60, principal="agent")
    assert not client.redis.exists(client.keys.run_owner(odd))
