"""A child forked while a parent's thread holds a lock of a shared object still works.

Only the forking thread goes on in the child: a lock another thread held at the fork stays
held there for ever. Each object threads share registers with ``toolq.forks`` and starts
afresh in the child. (The waits' reader: tests/dispatch/test_dispatch_company.py.)
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tests.conftest import make_settings
from toolq.dispatch.commit import Company
from toolq.models import CallEnvelope, EventType
from toolq.registry.upstream.connections import SessionLoop
from toolq.results.group_commit import GroupCommitter, Request
from toolq.results.waits import Pace
from toolq.workers.news import News, NewsWriter

pytestmark = pytest.mark.timeout(60)


def forked_while_held(lock: Any, child: Callable[[], object]) -> int:
    """The exit code of a child forked while another thread holds ``lock``, that runs
    ``child`` (0 when it returned truthy within 10 s)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(30)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(10)  # a hang ends the child, not the test
            code = 0 if child() else 2
        finally:
            os._exit(code)
    release.set()
    holder.join(30)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_the_company_of_dispatches() -> None:
    company = Company(Pace(), 0.005)
    company.arrived()
    assert forked_while_held(company._lock, lambda: company.arrived() or True) == 0


def test_the_pace_of_waits() -> None:
    pace = Pace()
    assert forked_while_held(pace._lock, lambda: pace.end(pace.begin(), ended=True) or True) == 0


class _Echo(GroupCommitter[Request]):
    def _send(self, batch: list[Request]) -> None:
        for request in batch:
            request.done = True


def test_a_group_committer() -> None:
    committer = _Echo()
    assert forked_while_held(committer._lock, lambda: committer._join(Request()).done) == 0


def test_the_news_writer() -> None:
    written: list[str] = []

    def write(batch: Sequence[News]) -> None:
        written.extend(item.envelope.call_id for item in batch)

    def item(call_id: str) -> News:
        envelope = CallEnvelope(call_id=call_id, run_id="r", tool_call_id=call_id, name="t")
        return News(envelope, "token", EventType.PROGRESS, json.dumps({}))

    writer = NewsWriter(write)
    writer.put(item("parent"))
    writer.flush(["parent"])

    def in_the_child() -> bool:
        writer.put(item("child"))
        writer.flush(["child"])
        return written == ["parent", "child"]

    try:
        assert forked_while_held(writer._changed, in_the_child) == 0
    finally:
        writer.stop()


def test_the_upstream_session_loop() -> None:
    assert forked_while_held(SessionLoop._lock, lambda: SessionLoop.current()) == 0


def test_the_cells_router() -> None:
    from toolq.cells import Cells
    from toolq.registry.registry import ToolRegistry

    # (nothing connects: the cells' clients are made, not used)
    shards = ["redis://127.0.0.1:1/0", "redis://127.0.0.1:1/1"]
    cells = Cells(make_settings(shards=shards), ToolRegistry())
    cells._remember(cells._runs, "parent", 1)

    def in_the_child() -> bool:
        cells._remember(cells._runs, "child", 0)
        child = cells._recalled(cells._runs, "child")
        return child is cells.cells[0] and cells._recalled(cells._runs, "parent") is cells.cells[1]

    assert forked_while_held(cells._lock, in_the_child) == 0


def test_the_run_owners() -> None:
    from toolq.keys import Keys
    from toolq.results.connection import redis_client
    from toolq.results.owners import RunOwners

    settings = make_settings()
    owners = RunOwners(redis_client("redis://127.0.0.1:1/0"), Keys(), settings)
    owners.cold = object()  # type: ignore[assignment]  # (only asked whether it is there)
    assert forked_while_held(owners._unarchived_lock, lambda: not owners.unarchived("r")) == 0
