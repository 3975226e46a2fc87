"""A run whose keys left Redis for the history store still belongs to its owner."""

from __future__ import annotations

import time

import pytest

from tests.apps import registry
from tests.conftest import make_settings
from tests.history.test_hot_bounds import archive, echo
from toolq import Client
from toolq.errors import NotRunOwnerError
from toolq.keys import Keys
from toolq.testing import TestWorker


def test_another_principal_may_not_dispatch_into_an_archived_run(r, history_url):
    settings = make_settings(history_url=history_url, hot_seconds=1)
    keys = Keys(settings.key_prefix)
    with Client(registry, settings) as client:
        first = client.dispatch(echo("e1", "hi"), run_id="run-own", principal="alice")
        with TestWorker(settings, registry) as worker:
            worker.drain()
        first.wait(timeout=5)
        assert archive(r, settings) == 1
        time.sleep(1.3)
        assert not r.exists(keys.run_owner("run-own"))
        with pytest.raises(NotRunOwnerError):
            client.dispatch(echo("x1", "mine now"), run_id="run-own", principal="mallory")


def test_another_tenant_gets_no_archived_call_of_a_run(r, history_url):
    """The same principal for another tenant: refused, as while the run is hot."""
    settings = make_settings(history_url=history_url, hot_seconds=1)
    with Client(registry, settings) as client:
        first = client.dispatch(echo("e1", "hi"), run_id="run-ten", principal="p", tenant="a")
        with TestWorker(settings, registry) as worker:
            worker.drain()
        first.wait(timeout=5)
        assert archive(r, settings) == 1
        time.sleep(1.3)
        with pytest.raises(NotRunOwnerError):
            client.dispatch(echo("e1", "hi"), run_id="run-ten", principal="p", tenant="b")
        # Its owner still gets its call back.
        again = client.dispatch(echo("e1", "hi"), run_id="run-ten", principal="p", tenant="a")
        assert again.call_ids == first.call_ids


def test_another_principal_may_not_take_an_archived_run_by_setting_its_rules(r, history_url):
    settings = make_settings(history_url=history_url, hot_seconds=1)
    with Client(registry, settings) as client:
        first = client.dispatch(echo("e1", "hi"), run_id="run-rules", principal="alice")
        with TestWorker(settings, registry) as worker:
            worker.drain()
        first.wait(timeout=5)
        assert archive(r, settings) == 1
        time.sleep(1.3)
        with pytest.raises(NotRunOwnerError):
            client.approvals.set_rules("run-rules", approve_tools=["echo"], principal="mallory")
        client.approvals.set_rules("run-rules", approve_tools=["echo"], principal="alice")
        with pytest.raises(NotRunOwnerError):
            client.dispatch(echo("x1", "mine now"), run_id="run-rules", principal="mallory")
