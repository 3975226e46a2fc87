"""Calls of unknown outcome end to end: a real worker killed -9 mid-call of a tool that is
not idempotent, the call parked as ``unknown``, then resolved over the HTTP API by an
approver (succeeded, failed, rerun) with signed decisions that verifying workers check, and
resolutions written straight into Redis refused."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from tests.cli.test_approve import toolq
from tests.conftest import Workers, make_settings, serve
from toolq import ApprovalClient, AsyncApprovalClient, CallStatus, Client
from toolq.approvals.audit import verify_audit
from toolq.errors import NotAuthorizedError, NotAwaitingApprovalError
from toolq.models import RiskLevel
from toolq.settings import ApiToken
from toolq.signing import Verifier, generate_pair

pytestmark = pytest.mark.e2e

TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(principal="alice", roles=["viewer", "approver:safe"]),
    "viewer-t": ApiToken(principal="vera", roles=["viewer"]),
}


HTTP_TIMEOUT = 30
"""Seconds an HTTP request to the API may take (httpx's 5 s is too short on a loaded machine)."""


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def executions(r: redis.Redis, call_id: str) -> int:
    return int(r.llen(f"test:exec:{call_id}"))


class Stack:
    """Verifying worker processes, a deciding API holding the signing key, a client."""

    def __init__(
        self, workers: Workers, api: str, client: Client, signing: str, verify: str
    ) -> None:
        self.workers, self.api, self.client = workers, api, client
        self.signing, self.verify = signing, verify

    def worker(self) -> object:
        return self.workers.start("safe", concurrency=1, TOOLQ_APPROVAL_VERIFY_KEYS=self.verify)

    def lose_a_call(self, r: redis.Redis, wait_for) -> tuple[str, str]:
        """Dispatch ``stall_first`` (not idempotent), kill -9 its worker mid-call; (call, run).

        The lost attempt would run for a minute, so the kill always lands mid-call; a re-run
        returns at once.
        """
        self.workers.stop_all()  # the victim is the only worker when the call is sent
        victim = self.worker()
        batch = self.client.dispatch(
            [{"id": "lost", "name": "stall_first", "arguments": {"seconds": 60}}],
            principal="agent",
        )
        call_id = batch.call_ids[0]
        wait_for(lambda: executions(r, call_id) == 1, message="call never started")
        self.workers.kill9(victim)  # type: ignore[arg-type]
        self.worker()
        wait_for(
            lambda: self.client.result(call_id).status is CallStatus.UNKNOWN,
            timeout=20,
            message="the lost call never became unknown",
        )
        return call_id, batch.run_id

    def final(self, call_id: str, timeout: float = 30) -> dict[str, object]:
        deadline = time.monotonic() + timeout
        while True:
            got = httpx.get(
                f"{self.api}/v1/calls/{call_id}", headers=h("agent-t"), timeout=HTTP_TIMEOUT
            ).json()
            if got["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
                return dict(got)
            time.sleep(0.1)


@pytest.fixture
def stack(r: redis.Redis, workers: Workers) -> Iterator[Stack]:
    from tests.apps import registry
    from toolq.api.app import create_app

    signing, verify = generate_pair()
    settings = make_settings(approval_signing_key=signing, approval_verify_keys=verify)
    with Client(registry, make_settings()) as client:
        for api in serve(create_app(settings, registry, tokens=TOKENS)):
            yield Stack(workers, api, client, signing, verify)


def resolve(stack: Stack, call_id: str, token: str = "alice-t", **body: object) -> httpx.Response:
    return httpx.post(
        f"{stack.api}/v1/calls/{call_id}/resolve", json=body, headers=h(token), timeout=HTTP_TIMEOUT
    )


def audit_of(r: redis.Redis, call_id: str) -> list[dict[str, str]]:
    entries = r.xrange("toolq:audit")
    out = []
    for _, fields in entries:
        f = {k.decode(): v.decode() for k, v in fields.items()}
        if f.get("call_id") == call_id:
            out.append(f)
    return out


def test_a_lost_call_waits_for_a_person_and_the_model_is_told(stack: Stack, r, wait_for):
    call_id, run_id = stack.lose_a_call(r, wait_for)
    listed = httpx.get(
        f"{stack.api}/v1/unknown", headers=h("viewer-t"), timeout=HTTP_TIMEOUT
    ).json()
    assert [(c["call_id"], c["status"]) for c in listed] == [(call_id, "unknown")]
    messages = httpx.get(
        f"{stack.api}/v1/runs/{run_id}/messages", headers=h("agent-t"), timeout=HTTP_TIMEOUT
    ).json()
    assert "Outcome unknown, being checked" in messages[0]["content"]
    assert "Do not repeat the call" in messages[0]["content"]
    metrics = httpx.get(f"{stack.api}/metrics", headers=h("viewer-t"), timeout=HTTP_TIMEOUT).text
    assert "toolq_calls_unknown 1" in metrics.splitlines()
    time.sleep(1.5)  # redelivered copies and sweeps do not run it again
    assert executions(r, call_id) == 1
    assert stack.client.result(call_id).status is CallStatus.UNKNOWN


def test_resolved_succeeded_over_http(stack: Stack, r, wait_for):
    call_id, run_id = stack.lose_a_call(r, wait_for)
    # a viewer and the submitter itself may not resolve it
    assert resolve(stack, call_id, "viewer-t", outcome="succeeded").status_code == 403
    with pytest.raises(NotAuthorizedError):  # its submitter may not, whatever its roles
        stack.client.resolve_unknown(call_id, "rerun", by="agent")
    done = resolve(stack, call_id, outcome="succeeded", note="charge found", result="charged")
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "succeeded" and done.json()["output"] == "charged"
    again = resolve(stack, call_id, outcome="rerun")
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_awaiting_approval"
    messages = httpx.get(
        f"{stack.api}/v1/runs/{run_id}/messages", headers=h("agent-t"), timeout=HTTP_TIMEOUT
    ).json()
    assert messages[0]["content"] == "charged"
    events = [e for e in stack.client.events(run_id) if e.call_id == call_id]
    assert events[-1].type.value == "call.succeeded"
    assert events[-1].data["resolved_by"] == "alice" and events[-1].data["note"] == "charge found"
    outcomes = [(e["by"], e["outcome"]) for e in audit_of(r, call_id)]
    assert outcomes == [
        ("agent", "refused:self_approval"),
        ("alice", "resolved:succeeded"),
        ("alice", "refused:succeeded"),
    ]
    time.sleep(1.0)
    assert executions(r, call_id) == 1


def test_resolved_failed_with_the_approval_clients(stack: Stack, r, wait_for):
    call_id, run_id = stack.lose_a_call(r, wait_for)

    async def listed() -> list[str]:
        async with AsyncApprovalClient(stack.api, "alice-t") as approver:
            return [c.call_id for c in await approver.unknown(run_id)]

    assert asyncio.run(listed()) == [call_id]
    with ApprovalClient(stack.api, "alice-t") as approver:
        result = approver.resolve(call_id, "failed", note="no charge at the bank")
        assert result.status is CallStatus.FAILED
        assert "no charge at the bank" in (result.error or "")
        with pytest.raises(NotAwaitingApprovalError):
            approver.resolve(call_id, "rerun")
        assert approver.unknown() == []
    assert [e["outcome"] for e in audit_of(r, call_id)] == ["resolved:failed", "refused:failed"]
    time.sleep(1.0)
    assert executions(r, call_id) == 1


def test_resolved_rerun_runs_it_exactly_once_more(stack: Stack, r, wait_for):
    call_id, run_id = stack.lose_a_call(r, wait_for)
    assert resolve(stack, call_id, outcome="rerun", note="not at the bank").status_code == 200
    result = stack.final(call_id)
    assert result["status"] == "succeeded" and result["output"] == "slept", result
    assert executions(r, call_id) == 2  # the lost attempt and the re-run
    types = [e.type.value for e in stack.client.events(run_id) if e.call_id == call_id]
    assert types.count("call.started") == 2
    assert types[types.index("call.unknown") + 1] == "call.retrying"
    assert [e["outcome"] for e in audit_of(r, call_id)] == ["resolved:rerun"]
    record = r.hgetall(f"toolq:call:{call_id}")
    assert json.loads(record[b"resolution"])["payload"]["attempt"] == 1


def test_the_resolution_is_signed_and_the_audit_verifies(stack: Stack, r, wait_for):
    call_id, _ = stack.lose_a_call(r, wait_for)
    assert resolve(stack, call_id, outcome="failed", note="x").status_code == 200
    report = verify_audit(r, stack.client.settings, Verifier.from_text(stack.verify))
    assert report.ok and report.valid >= 1, report
    [entry] = audit_of(r, call_id)
    assert entry["outcome"] == "resolved:failed" and entry["sig"]


def forge(r: redis.Redis, client: Client, call_id: str, resolution: object) -> None:
    """What a Redis writer can do: mark an unknown call queued with a resolution of its own
    making and push a Celery message for it."""
    key = f"toolq:call:{call_id}"
    envelope = json.loads(r.hget(key, "envelope"))
    r.hset(key, mapping={"status": "queued", "resolution": json.dumps(resolution)})
    r.zrem("toolq:calls:unknown", call_id)
    queue, message = client.publisher.message(
        call_id, RiskLevel.parse(envelope["risk"]), None, envelope["run_id"]
    )
    r.lpush(queue, message)


@pytest.mark.parametrize("signed_by", ["nobody", "another-key"])
def test_a_forged_rerun_written_into_redis_does_not_run(stack: Stack, r, wait_for, signed_by):
    call_id, _ = stack.lose_a_call(r, wait_for)
    record = {k.decode(): v.decode() for k, v in r.hgetall(f"toolq:call:{call_id}").items()}
    envelope = json.loads(record["envelope"])
    payload = {
        "call_id": call_id,
        "run_id": envelope["run_id"],
        "tool": "stall_first",
        "risk": "safe",
        "digest": "",
        "submitter": "agent",
        "tenant": "default",
        "outcome": "rerun",
        "attempt": 1,
        "by": "alice",
        "note": "",
        "ts": repr(time.time()),
        "v": 1,
        "kind": "resolution",
    }
    if signed_by == "nobody":
        forged: object = {"payload": payload}
    else:
        from toolq.approvals.policy import digest_call
        from toolq.signing import Signer

        payload["digest"] = digest_call(envelope["name"], envelope["arguments"])
        forged = Signer.from_text(generate_pair()[0]).sign(
            "resolution", **{k: v for k, v in payload.items() if k not in ("v", "kind")}
        )
    # an unknown call's message alone is skipped: START takes queued calls only
    queue, message = stack.client.publisher.message(
        call_id, RiskLevel.SAFE, None, envelope["run_id"]
    )
    r.lpush(queue, message)
    time.sleep(1.5)
    assert stack.client.result(call_id).status is CallStatus.UNKNOWN
    forge(r, stack.client, call_id, forged)
    result = stack.final(call_id)
    assert result["status"] == "failed" and result["error_type"] == "approval_unverified"
    assert "re-run resolution" in str(result["error"])
    assert executions(r, call_id) == 1  # the handler never ran again
    refused = [e for e in audit_of(r, call_id) if e["outcome"] == "refused:approval_unverified"]
    assert refused and refused[0]["by"] == "worker"


# Seven `toolq` processes and four worker start-ups: beside a second copy of the suite on two
# loaded cores it ran into the suite's 120 s (62 s alone at load 13).
@pytest.mark.timeout(300)
def test_cli_resolves_signed_here_and_through_the_api(stack: Stack, r, wait_for):
    call_id, _ = stack.lose_a_call(r, wait_for)
    settings = stack.client.settings
    cancel = toolq("calls", "cancel", call_id, settings=settings)
    assert cancel.returncode == 1 and "unknown outcome" in cancel.stderr
    listed = toolq("calls", "list", "--status", "unknown", "--json", settings=settings)
    assert listed.returncode == 0 and call_id in listed.stdout
    unsigned = toolq("calls", "resolve", call_id, "--rerun", settings=settings)
    assert unsigned.returncode == 1 and "TOOLQ_APPROVAL_SIGNING_KEY" in unsigned.stderr
    both = toolq("calls", "resolve", call_id, "--rerun", "--failed", settings=settings)
    assert both.returncode == 2
    done = toolq(
        "calls",
        "resolve",
        call_id[:12],
        "--rerun",
        "--note",
        "not sent",
        "--by",
        "alice",
        settings=settings,
        TOOLQ_APP="tests.apps:registry",
        TOOLQ_APPROVAL_SIGNING_KEY=stack.signing,
    )
    assert done.returncode == 0, done.stderr
    assert f"resolved {call_id}: queued" in done.stdout
    assert stack.final(call_id)["status"] == "succeeded"  # the verifying worker ran it
    assert executions(r, call_id) == 2

    call_id, _ = stack.lose_a_call(r, wait_for)
    via_api = toolq(
        "calls",
        "resolve",
        call_id,
        "--failed",
        "--note",
        "bounced",
        "--api",
        stack.api,
        "--token",
        "alice-t",
        settings=settings,
    )
    assert via_api.returncode == 0, via_api.stderr
    assert f"resolved {call_id}: failed" in via_api.stdout
    refused = toolq(
        "calls",
        "resolve",
        call_id,
        "--rerun",
        "--api",
        stack.api,
        "--token",
        "alice-t",
        settings=settings,
    )
    assert refused.returncode == 1 and "409" in refused.stderr
    assert executions(r, call_id) == 1


def test_a_hung_worker_that_wakes_settles_the_call_it_lost(stack: Stack, r, wait_for):
    # The worker stops (SIGSTOP: a hang, a VM paused) mid-call: the call's lease lapses and it
    # is parked as unknown. The worker wakes and its handler ends: that outcome is the call's.
    stack.workers.stop_all()
    victim: Any = stack.worker()
    call_id = stack.client.dispatch(
        [{"id": "hung", "name": "slow", "arguments": {"seconds": 2}}], principal="agent"
    ).call_ids[0]
    wait_for(lambda: executions(r, call_id) == 1, message="call never started")
    os.killpg(victim.pid, signal.SIGSTOP)
    try:
        stack.worker()
        wait_for(
            lambda: stack.client.result(call_id).status is CallStatus.UNKNOWN,
            timeout=30,
            message="the call of the hung worker never became unknown",
        )
    finally:
        os.killpg(victim.pid, signal.SIGCONT)
    got = stack.final(call_id)
    assert (got["status"], got["output"]) == ("succeeded", "slept"), got
    assert executions(r, call_id) == 1
    assert r.zscore("toolq:calls:unknown", call_id) is None
    listed = httpx.get(f"{stack.api}/v1/unknown", headers=h("viewer-t"), timeout=HTTP_TIMEOUT)
    assert listed.json() == []


def test_a_woken_runner_is_not_cut_short_and_its_handler_settles_the_call(
    stack: Stack, r, wait_for
):
    """The handler still has work left when its worker wakes. Its lease is gone, but the call
    waits as unknown under its token (nobody runs it again without a person): cancelling the
    run would end it with an outcome toolq made up (``cancelled`` says nothing of the
    effect), so the run goes on and the handler's own outcome settles the call."""
    stack.workers.stop_all()
    victim: Any = stack.worker()
    call_id = stack.client.dispatch(
        [{"id": "hung", "name": "slow", "arguments": {"seconds": 12}}], principal="agent"
    ).call_ids[0]
    wait_for(lambda: executions(r, call_id) == 1, message="call never started")
    os.killpg(victim.pid, signal.SIGSTOP)
    try:
        stack.worker()
        wait_for(
            lambda: stack.client.result(call_id).status is CallStatus.UNKNOWN,
            timeout=30,
            message="the call of the hung worker never became unknown",
        )
    finally:
        os.killpg(victim.pid, signal.SIGCONT)
    got = stack.final(call_id, timeout=40)
    assert (got["status"], got["output"]) == ("succeeded", "slept"), got
    assert executions(r, call_id) == 1


def test_a_woken_runner_past_its_time_limit_does_not_settle_the_call_as_failed(
    stack: Stack,
    r,
    wait_for,
):
    """The hang outlasts the tool's time limit: on waking, the executor's limit fires (or the
    keeper's cancel) and the runner FINISHes ``failed``/``cancelled``. recover.lua never makes
    a lost call of a tool not idempotent failed ("a failed call can be retried without a
    person"); the late FINISH does, and the submitter may now retry a call whose effect
    may have happened."""
    stack.workers.stop_all()
    victim: Any = stack.workers.start(
        "safe", concurrency=1, TOOLQ_APPROVAL_VERIFY_KEYS=stack.verify, TOOLQ_DEFAULT_TIMEOUT="4"
    )
    call_id = stack.client.dispatch(
        [{"id": "hung", "name": "slow", "arguments": {"seconds": 60}}], principal="agent"
    ).call_ids[0]
    wait_for(lambda: executions(r, call_id) == 1, message="call never started")
    os.killpg(victim.pid, signal.SIGSTOP)
    try:
        stack.worker()
        wait_for(
            lambda: stack.client.result(call_id).status is CallStatus.UNKNOWN,
            timeout=30,
            message="the call of the hung worker never became unknown",
        )
        time.sleep(5)  # past the 4 s limit while stopped
    finally:
        os.killpg(victim.pid, signal.SIGCONT)
    time.sleep(3)
    got = stack.client.result(call_id)
    assert executions(r, call_id) == 1
    assert got.status is CallStatus.UNKNOWN, (got.status, got.error_type, got.error)
