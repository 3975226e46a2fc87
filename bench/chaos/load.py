"""The load: client processes that dispatch and wait, and the auto-approver process.

Both run in their own processes (``multiprocessing``, spawn) and write every operation to
the history. A dispatch that fails (Redis down) is retried with the same run id and the
same provider call ids, which toolq's idempotency keys turn into the same calls.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

from bench.chaos.app import registry
from bench.chaos.history import History, error_reason
from toolq import Client, Settings
from toolq.errors import (
    ApprovalExpiredError,
    NotAwaitingApprovalError,
    WaitTimeoutError,
)

RACING_KEY = "chaos:racing-until"
"""Until this time (epoch seconds) every parked call gets several racing approvers."""

RETRYABLE = frozenset({"redis_unavailable", "redis_loading"})

TENANTS = {"t0": {"weight": 2}, "*": {"weight": 1}}
"""``TOOLQ_TENANTS`` of a run with several tenants (clients and workers)."""


@dataclass(frozen=True)
class LoadConfig:
    """What the load processes need (picklable)."""

    redis_url: str
    out_dir: Path
    calls: int
    duration: float
    seed: int
    start_at: float
    dispatch_retry: float = 30.0
    wait_timeout: float = 90.0
    inflight: int = 2
    tenants: int = 1
    """Client ``i`` dispatches for tenant ``t{i % tenants}`` (``TENANTS`` gives their weights)."""
    racers: int = 4
    racing_share: float = 0.2
    deny_share: float = 0.1
    shards: tuple[str, ...] = ()
    """The cells' URLs in two-cell mode (``--cells``): clients and approver route by run."""
    keys: dict[str, str] = field(default_factory=dict)
    """``TOOLQ_*`` key settings of the run (``toolq keys generate``): the approver signs with
    the signing key, every process seals/opens secrets with the secrets key."""

    def settings(self, *, approver: bool = False) -> Settings:
        values: dict[str, object] = {"secrets_key": self.keys.get("TOOLQ_SECRETS_KEY")}
        if approver:
            values["approval_signing_key"] = self.keys.get("TOOLQ_APPROVAL_SIGNING_KEY")
        if self.shards:
            values["shards"] = list(self.shards)
        if self.tenants > 1:
            values["tenants"] = TENANTS
        return Settings(redis_url=self.redis_url, app="bench.chaos.app:registry", **values)  # type: ignore[arg-type]


def _payload(rng: random.Random, prefix: str, size: int) -> list[dict[str, Any]]:
    calls = []
    for i in range(size):
        roll = rng.random()
        if roll < 0.15:
            name, args = "fast_echo", {"text": f"t{rng.randrange(10**6)}"}
        elif roll < 0.25:
            name, args = "throttled_work", {"ms": rng.randrange(20, 200)}
        elif roll < 0.45:
            name, args = "fast_lookup", {"key": f"k{rng.randrange(10**6)}"}
        elif roll < 0.60:
            name, args = "moderate_work", {"ms": rng.randrange(50, 700)}
        elif roll < 0.75:
            name, args = "moderate_idempotent", {"ms": rng.randrange(50, 700)}
        elif roll < 0.85:
            name, args = "stream_chunks", {"n": rng.randrange(3, 10)}
        else:
            name, args = "dangerous_op", {"target": f"db{i}", "ms": rng.randrange(20, 300)}
        calls.append({"id": f"{prefix}-{i}", "name": name, "arguments": args})
    return calls


def run_client(index: int, cfg: LoadConfig) -> None:
    """Dispatch ``cfg.calls`` calls (singles and small batches), paced over the duration.

    ``cfg.inflight`` threads share the calls and one ``Client``; each dispatches, waits for
    its batch, and goes on, so up to ``inflight`` batches of this client are in flight.
    """
    history = History(cfg.out_dir, f"client-{index}")
    client = Client(registry, cfg.settings())
    shares = [
        cfg.calls // cfg.inflight + (t < cfg.calls % cfg.inflight) for t in range(cfg.inflight)
    ]
    threads = [
        threading.Thread(target=_client_thread, args=(index, t, n, cfg, client, history))
        for t, n in enumerate(shares)
        if n
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        history.close()
        with contextlib.suppress(Exception):  # closing after an outage may fail
            client.close()


def _client_thread(
    index: int, thread: int, calls: int, cfg: LoadConfig, client: Client, history: History
) -> None:
    rng = random.Random(f"{cfg.seed}-client-{index}-{thread}")
    sent = 0
    op = 0
    while sent < calls:
        pause = cfg.start_at + cfg.duration * sent / calls - time.time()
        if pause > 0:
            time.sleep(pause)
        size = 1 if rng.random() < 0.5 else rng.randrange(2, 5)
        size = min(size, calls - sent)
        run_id = f"c{index}-{thread}-{op}"
        payload = _payload(rng, run_id, size)
        sent += size
        op += 1
        call_ids = _dispatch(
            client, history, cfg, run_id, payload, f"client-{index}", f"t{index % cfg.tenants}"
        )
        if call_ids is not None:
            _wait(client, history, cfg, run_id, call_ids)


def _dispatch(
    client: Client,
    history: History,
    cfg: LoadConfig,
    run_id: str,
    payload: list[dict[str, Any]],
    principal: str,
    tenant: str,
) -> list[str] | None:
    ids = [c["id"] for c in payload]
    tools = [c["name"] for c in payload]
    first = time.time()
    deadline = time.monotonic() + cfg.dispatch_retry
    attempt = 0
    while True:
        attempt += 1
        start = time.time()
        try:
            batch = client.dispatch(payload, run_id=run_id, principal=principal, tenant=tenant)
        except Exception as exc:  # every failure goes to the history
            reason = error_reason(exc)
            common = {"run_id": run_id, "tool_call_ids": ids, "tools": tools, "op_start": first}
            history.append(
                "dispatch",
                time=start,
                end=time.time(),
                attempt=attempt,
                outcome="error",
                reason=reason,
                error=str(exc)[:300],
                **common,
            )
            if reason not in RETRYABLE or time.monotonic() > deadline:
                history.append("dispatch", outcome="rejected", reason=reason, **common)
                return None
            time.sleep(0.5)
            continue
        history.append(
            "dispatch",
            time=start,
            end=time.time(),
            op_start=first,
            attempt=attempt,
            outcome="ok",
            run_id=run_id,
            tool_call_ids=ids,
            tools=tools,
            call_ids=batch.call_ids,
            statuses=[c.status.value for c in batch.calls],
            duplicates=[c.duplicate for c in batch.calls],
        )
        return batch.call_ids


def _wait(
    client: Client, history: History, cfg: LoadConfig, run_id: str, call_ids: list[str]
) -> None:
    start = time.time()
    deadline = time.monotonic() + cfg.wait_timeout
    errors = 0
    while True:
        try:
            results = client.wait(
                call_ids, timeout=max(0.1, deadline - time.monotonic()), run_id=run_id
            )
        except WaitTimeoutError as exc:
            history.append(
                "wait",
                time=start,
                end=time.time(),
                run_id=run_id,
                call_ids=call_ids,
                outcome="timeout",
                pending=exc.details.get("pending", []),
                errors=errors,
            )
            return
        except Exception as exc:  # Redis outage: wait again
            errors += 1
            if time.monotonic() > deadline:
                history.append(
                    "wait",
                    time=start,
                    end=time.time(),
                    run_id=run_id,
                    call_ids=call_ids,
                    outcome="error",
                    reason=error_reason(exc),
                    error=str(exc)[:300],
                    errors=errors,
                )
                return
            time.sleep(0.5)
            continue
        history.append(
            "wait",
            time=start,
            end=time.time(),
            run_id=run_id,
            call_ids=call_ids,
            outcome="ok",
            errors=errors,
            results=[
                {"call_id": r.call_id, "status": r.status.value, "error_type": r.error_type}
                for r in results
            ],
        )
        return


def run_approver(cfg: LoadConfig, stop: EventType) -> None:
    """Decide every parked call; some (and all, while racing is on) by several racing approvers.

    It is also the on-call person: a call of unknown outcome (its worker was killed mid-call
    and its tool is not idempotent) is resolved ``failed`` as soon as it shows, so that it
    ends, without ever running twice.
    """
    rng = random.Random(f"{cfg.seed}-approver")
    history = History(cfg.out_dir, "approver")
    client = Client(registry, cfg.settings(approver=True))
    # The racing flag is on the first cell's Redis (each cell's injector sets it on its own;
    # a CellRouter has no Redis of its own: reading it there failed every poll with cells,
    # and no call was ever decided).
    flags = client.cell_clients[0].redis
    decided: set[str] = set()
    try:
        while not stop.is_set():
            try:
                pending = client.approvals.pending()
                unknown = client.approvals.unknown()
                racing_until = float(flags.get(RACING_KEY) or 0)
            except Exception as exc:  # Redis outage
                history.append("poll", outcome="error", reason=error_reason(exc))
                stop.wait(0.5)
                continue
            for request in pending:
                if request.call_id in decided:
                    continue
                racing = time.time() < racing_until or rng.random() < cfg.racing_share
                racers = cfg.racers if racing else 1
                choices = [
                    "deny" if rng.random() < cfg.deny_share else "approve" for _ in range(racers)
                ]
                if _decide(client, history, request.call_id, choices):
                    decided.add(request.call_id)
            for request in unknown:
                _resolve_failed(client, history, request.call_id)
            stop.wait(0.1)
    finally:
        history.close()
        with contextlib.suppress(Exception):
            client.close()


def _resolve_failed(client: Client, history: History, call_id: str) -> None:
    """Resolve a call of unknown outcome as not having taken effect (an on-call's decision)."""
    start = time.time()
    fields: dict[str, Any]
    try:
        client.resolve_unknown(call_id, "failed", by="oncall", note="chaos: worker killed")
        fields = {"outcome": "ok"}
    except NotAwaitingApprovalError as exc:
        fields = {"outcome": "conflict", "status": exc.details.get("status")}
    except Exception as exc:  # outage: resolved on a later poll
        fields = {"outcome": "error", "reason": error_reason(exc), "error": str(exc)[:200]}
    history.append("resolve", time=start, end=time.time(), call_id=call_id, **fields)


def _decide(client: Client, history: History, call_id: str, choices: list[str]) -> bool:
    """Run the decisions at once (one thread each); True when the call is decided."""
    barrier = threading.Barrier(len(choices))
    definitive: list[bool] = []

    def one(k: int, decision: str) -> None:
        by = f"approver-{k}"
        barrier.wait()
        start = time.time()
        fields: dict[str, Any]
        try:
            if decision == "approve":
                client.approvals.approve(call_id, by=by)
            else:
                client.approvals.deny(call_id, by=by, reason="chaos says no")
            fields = {"outcome": "ok"}
            definitive.append(True)
        except NotAwaitingApprovalError as exc:
            fields = {"outcome": "conflict", "status": exc.details.get("status")}
            definitive.append(True)
        except ApprovalExpiredError:
            fields = {"outcome": "expired"}
            definitive.append(True)
        except Exception as exc:  # outage: indeterminate, decide again later
            fields = {"outcome": "error", "reason": error_reason(exc), "error": str(exc)[:200]}
        history.append(
            "decide",
            time=start,
            end=time.time(),
            call_id=call_id,
            by=by,
            decision=decision,
            racers=len(choices),
            **fields,
        )

    threads = [threading.Thread(target=one, args=(k, d)) for k, d in enumerate(choices)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return any(definitive)
