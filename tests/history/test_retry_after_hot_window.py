"""A retry that straddles the end of its call's hot window, and records that are no calls.

``retry_call`` checks that the old record is still in Redis, dispatches the retry (which
can take a while: the dispatcher runs the tool's approval predicate, budgets, the history
store's claim lookup), then links both records. When the old record's hot TTL
(``cool.lua``) ends in between, the link must not write a new hash in place of the
archived call: such a one-field hash never expires, shadows the archived row for every
reader, and, named again in the archive stream by the retry, is read by the archiver.

An archiver must also get past an archive entry naming a hash that is no call's record
(that stub, or any Redis writer's): left failing, its whole batch (other tenants' finished
calls with it) stays pending and is retried forever, and those calls never reach the
history store.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from tests.conftest import make_settings
from toolq import Client, RiskLevel, ToolRegistry
from toolq.errors import NotRetryableError
from toolq.history.archiver import Archiver
from toolq.history.store import HistoryStore
from toolq.keys import Keys

SLOW = threading.Event()


def _slow_predicate(arguments: dict[str, object]) -> bool:
    if SLOW.is_set():
        time.sleep(1.6)  # the dispatch of the retry outlasts the old record's hot window
    return True


registry = ToolRegistry()


@registry.tool(risk=RiskLevel.DANGEROUS, requires_approval=_slow_predicate)
def transfer(amount: int) -> str:
    """Move money (gated)."""
    return f"moved {amount}"


def _archive_until_quiet(archiver: Archiver) -> None:
    for _ in range(5):
        time.sleep(0.15)  # past history_claim_after: a pending batch is taken again
        # a failing batch stays pending (ArchiverThread logs it and retries)
        with contextlib.suppress(Exception):
            archiver.step(100)


def test_a_retry_straddling_the_hot_window_leaves_the_archived_call_alone(r, history_url):
    SLOW.clear()
    settings = make_settings(history_url=history_url, hot_seconds=1, history_claim_after=0.1)
    keys = Keys(settings.key_prefix)
    history = HistoryStore(settings.history_url)
    archiver = Archiver(r, keys, settings, history, "a1")
    with contextlib.closing(history), Client(registry, settings) as client:
        parked = client.dispatch(
            [{"id": "t1", "name": "transfer", "arguments": {"amount": 5}}],
            run_id="r-stub",
            principal="agent",
        )
        [old] = parked.call_ids
        client.approvals.deny(old, "alice", "no")
        assert archiver.step(100) == 1
        assert 0 < r.ttl(keys.call(old)) <= 1  # cooled: the hot window
        assert client.result(old).status.value == "denied"

        SLOW.set()
        try:
            with pytest.raises(NotRetryableError):
                client.retry(old, principal="agent")
        finally:
            SLOW.clear()

        assert not r.exists(keys.call(old))  # no stub in place of the archived call
        # The client that saw 'denied' still reads it (from the history store).
        assert client.result(old).status.value == "denied"

        # Another run's call, finished now, reaches the history store.
        other = client.dispatch(
            [{"id": "t2", "name": "transfer", "arguments": {"amount": 7}}],
            run_id="r-bystander",
            principal="bob",
        )
        [bystander] = other.call_ids
        client.approvals.deny(bystander, "alice", "no")
        _archive_until_quiet(archiver)
        assert history.record(bystander) is not None


def test_an_archive_entry_naming_no_call_record_does_not_hold_its_batch(r, history_url):
    settings = make_settings(history_url=history_url, history_claim_after=0.1)
    keys = Keys(settings.key_prefix)
    history = HistoryStore(settings.history_url)
    archiver = Archiver(r, keys, settings, history, "a1")
    with contextlib.closing(history), Client(registry, settings) as client:
        parked = client.dispatch(
            [{"id": "t3", "name": "transfer", "arguments": {"amount": 9}}],
            run_id="r-victim",
            principal="bob",
        )
        [victim] = parked.call_ids
        # A Redis writer (or the stub above) names a hash that is no call's record.
        r.hset(keys.call("junk"), "retried_by", "x")
        r.xadd(keys.history_archive, {"call_id": "junk", "run_id": "r-x", "ts": "1"})
        client.approvals.deny(victim, "alice", "no")  # same batch as the junk entry
        _archive_until_quiet(archiver)
        assert history.record(victim) is not None
        assert history.record("junk") is None
        assert r.xlen(keys.history_archive) == 0  # nothing left pending
