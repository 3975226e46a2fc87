"""Built-in tools through real workers: a MODERATE edit runs and is undone, a DANGEROUS
command waits for approval, then streams its output as progress events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from tests.conftest import Workers
from toolq import CallStatus, Client, EventType, Settings

pytestmark = pytest.mark.e2e


@pytest.fixture
def builtins_client(settings: Settings) -> Iterator[Client]:
    from tests.builtins.app import registry

    with Client(registry, settings) as c:
        yield c


def call(name: str, call_id: str, **arguments: object) -> list[dict[str, object]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


def test_builtins_through_workers(
    builtins_client: Client, workers: Workers, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = builtins_client
    monkeypatch.setenv("TOOLQ_TEST_SECRET", "sk-xyz")  # the workers inherit it; the child must not
    workers.start(TOOLQ_APP="tests.builtins.app:registry", TOOLQ_BUILTINS_ROOT=str(workspace))

    # MODERATE: runs at once
    (workspace / "notes.txt").write_text("old\n")
    edit = client.dispatch(call("write_file", "w1", path="notes.txt", content="new\n"))
    [written] = edit.wait(timeout=30)
    assert written.status is CallStatus.SUCCEEDED, written.error
    assert (workspace / "notes.txt").read_text() == "new\n"

    # DANGEROUS: parked until approved, then streams its output
    script = 'cat notes.txt; echo "secret=$TOOLQ_TEST_SECRET"; echo to-stderr >&2'
    batch = client.dispatch(call("run_shell", "s1", argv=["sh", "-c", script]))
    call_id = batch.call_ids[0]
    assert client.result(call_id).status is CallStatus.AWAITING_APPROVAL
    client.approvals.approve(call_id, by="alice")
    [ran] = batch.wait(timeout=60)
    assert ran.status is CallStatus.SUCCEEDED, ran.error
    assert ran.output["exit_code"] == 0
    assert ran.output["stdout"] == "new\nsecret=\n"
    assert ran.output["stderr"] == "to-stderr\n"
    progress = [
        e.data["data"]
        for e in client.events(batch.run_id)
        if e.type is EventType.PROGRESS and e.call_id == call_id
    ]
    assert {"stream": "stdout", "text": "new\n"} in progress or {
        "stream": "stdout",
        "text": "new\nsecret=\n",
    } in progress
    assert {"stream": "stderr", "text": "to-stderr\n"} in progress
    assert "".join(p["text"] for p in progress if p["stream"] == "stdout") == "new\nsecret=\n"

    # undo of the edit, on a worker
    event = client.undo(edit.call_ids[0], timeout=30)
    assert event.type is EventType.UNDONE
    assert (workspace / "notes.txt").read_text() == "old\n"


def test_sandboxed_code_on_a_root_worker_cannot_reach_redis(
    builtins_client: Client, workers: Workers, workspace: Path, settings: Settings, r: Redis
) -> None:
    """Through a real worker: approved sandboxed code tries to connect to Redis."""
    from tests.builtins.test_isolation import REDIS_ATTACK, redis_target

    client = builtins_client
    workers.start(TOOLQ_APP="tests.builtins.app:registry", TOOLQ_BUILTINS_ROOT=str(workspace))
    key = "attack-from-a-worker"
    code = (
        REDIS_ATTACK
        + "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
    )
    arguments = {"code": code, "args": [*redis_target(settings), key]}
    batch = client.dispatch(call("run_python", "p1", **arguments))
    client.approvals.approve(batch.call_ids[0], by="alice")
    [ran] = batch.wait(timeout=60)
    assert ran.status is CallStatus.SUCCEEDED, ran.error
    refused, processes = ran.output["stdout"].splitlines()
    assert refused == "refused [Errno 101] Network is unreachable"
    assert r.exists(key) == 0
    assert processes == "[1, 2]"  # the namespace's init and this python: nothing of the host
