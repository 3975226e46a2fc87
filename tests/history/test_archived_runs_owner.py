"""A run whose keys left Redis for the history store still belongs to its owner."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import event

from tests.apps import registry
from tests.conftest import make_settings
from tests.history.test_hot_bounds import archive, echo
from toolq import Client
from toolq.dispatch.client import Batch
from toolq.errors import NotRunOwnerError
from toolq.keys import Keys
from toolq.testing import TestWorker


@pytest.fixture
def archived(r, history_url) -> Iterator[tuple[Client, Batch]]:
    """A client, and the call ``alice`` dispatched to run ``run-own`` for tenant ``a``, run,
    archived, and gone from Redis with its run's keys."""
    settings = make_settings(history_url=history_url, hot_seconds=1)
    with Client(registry, settings) as client:
        first = client.dispatch(echo("e1", "hi"), run_id="run-own", principal="alice", tenant="a")
        with TestWorker(settings, registry) as worker:
            worker.drain()
        first.wait(timeout=5)
        assert archive(r, settings) == 1
        time.sleep(1.3)
        assert not r.exists(Keys(settings.key_prefix).run_owner("run-own"))
        yield client, first


def test_another_principal_may_not_dispatch_into_an_archived_run(archived):
    client, _ = archived
    with pytest.raises(NotRunOwnerError):
        client.dispatch(echo("x1", "mine"), run_id="run-own", principal="mallory", tenant="a")


def test_another_tenant_gets_no_archived_call_of_a_run(archived):
    """The same principal for another tenant: refused, as while the run is hot."""
    client, first = archived
    with pytest.raises(NotRunOwnerError):
        client.dispatch(echo("e1", "hi"), run_id="run-own", principal="alice", tenant="b")
    # Its owner still gets its call back.
    again = client.dispatch(echo("e1", "hi"), run_id="run-own", principal="alice", tenant="a")
    assert again.call_ids == first.call_ids


def test_another_principal_may_not_take_an_archived_run_by_setting_its_rules(archived):
    client, _ = archived
    with pytest.raises(NotRunOwnerError):
        client.approvals.set_rules("run-own", approve_tools=["echo"], principal="mallory")
    client.approvals.set_rules("run-own", approve_tools=["echo"], principal="alice", tenant="a")
    with pytest.raises(NotRunOwnerError):
        client.dispatch(echo("x1", "mine"), run_id="run-own", principal="mallory", tenant="a")


def test_a_new_named_run_asks_the_history_store_once(r, history_url):
    """Its first dispatch finds no archived call of it; for a while Redis alone answers."""
    settings = make_settings(history_url=history_url)
    with Client(registry, settings) as client:
        assert client.history is not None
        statements: list[str] = []
        event.listen(
            client.history.engine,
            "before_cursor_execute",
            lambda _conn, _cursor, statement, *_: statements.append(statement),
        )
        client.dispatch(echo("n1", "one"), run_id="run-new", principal="alice")
        first = len(statements)
        client.dispatch(echo("n2", "two"), run_id="run-new", principal="alice")
        # Asked before: its owner and its calls' claims on the first dispatch, its calls'
        # claims on every later one.
        assert (first, len(statements) - first) == (1, 0), statements
        with pytest.raises(NotRunOwnerError):
            client.dispatch(echo("x1", "mine"), run_id="run-new", principal="mallory")
