"""``Bridge``: one toolq run as a framework adapter drives it, one call per provider call id.

Every adapter dispatches each tool call on its own, under the framework's call id, so a
dispatch repeated after a resume (or in a new process) finds the same toolq call through
toolq's idempotency key instead of running a second one. No framework is imported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from toolq.approvals.models import ApprovalRequest
from toolq.dispatch.async_client import AsyncClient
from toolq.dispatch.client import Client
from toolq.dispatch.providers.outcome import outcome, text_of
from toolq.errors import (
    ApprovalPredicateError,
    NotAwaitingApprovalError,
    ToolqError,
    WaitTimeoutError,
)
from toolq.models import CallResult, CallStatus, Event

WAIT_SLICE = 1.0
"""Seconds one blocking wait lasts before it checks whether its waiter went away."""


class Bridge:
    """Dispatches, waits for, decides and cancels the calls of one toolq run."""

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        run_id: str | None = None,
        principal: str | None = None,
        approver: str = "framework",
        behavior: str | None = None,
    ) -> None:
        self.client = client.sync if isinstance(client, AsyncClient) else client
        self.run_id = run_id or uuid.uuid4().hex
        self.principal = principal
        self.approver = approver
        self.behavior = behavior

    def with_run(self, run_id: str) -> Bridge:
        """The same settings on another toolq run."""
        return Bridge(
            self.client,
            run_id=run_id,
            principal=self.principal,
            approver=self.approver,
            behavior=self.behavior,
        )

    # -- calls -------------------------------------------------------------------------------

    def submit(self, tool_call_id: str, name: str, arguments: dict[str, Any]) -> CallResult:
        """Dispatch one call (or find the one dispatched before under this id); its state now."""
        batch = self.client.dispatch(
            [{"id": tool_call_id, "name": name, "arguments": arguments}],
            run_id=self.run_id,
            principal=self.principal,
            behavior=self.behavior,
        )
        ref = batch.calls[0]
        if ref.status.is_final:
            return self.client.result(ref.call_id)
        return CallResult(
            call_id=ref.call_id,
            tool_call_id=ref.tool_call_id,
            name=ref.name,
            status=ref.status,
            run_id=self.run_id,
        )

    def find(self, tool_call_id: str) -> CallResult | None:
        """The run's call for a provider call id, or None if none was dispatched."""
        for result in self.client.results(self.run_id):
            if result.tool_call_id == tool_call_id:
                return result
        return None

    def request(self, call_id: str) -> ApprovalRequest:
        """A call as approvers see it (secrets masked)."""
        return self.client.approvals.get(call_id)

    def wait(self, call_id: str, stop: threading.Event | None = None) -> CallResult:
        """Block until the call is final (or ``stop`` is set: its current state)."""
        while True:
            try:
                [result] = self.client.wait([call_id], timeout=WAIT_SLICE, run_id=self.run_id)
                return result
            except WaitTimeoutError:
                if stop is not None and stop.is_set():
                    return self.client.result(call_id)

    async def result(self, call_id: str) -> CallResult:
        """Await the call's final result; cancelling the awaiting task cancels the call."""
        stop = threading.Event()
        try:
            return await asyncio.to_thread(self.wait, call_id, stop)
        finally:
            stop.set()

    @contextlib.contextmanager
    def cancelled_with_task(self, call_id: str) -> Iterator[None]:
        """Cancel the call when the task awaiting inside this block is cancelled.

        The cancel is one quick Redis write made at once, so it lands even while the
        event loop shuts down.
        """
        try:
            yield
        except asyncio.CancelledError:
            self.cancel(call_id)
            raise

    def would_park(self, name: str, arguments: dict[str, Any]) -> bool:
        """Whether toolq's gate would park this call now (False when it would fail instead)."""
        tool = self.client.registry.get(name)
        if tool is None:
            return False
        try:
            tool.validate(arguments)
            policy = self.client.cell_for_run(self.run_id).policy  # the run's cell's rules
            rules = policy.run_rules(self.run_id)
            return policy.route(tool, arguments, rules) == "park"
        except ApprovalPredicateError:
            return True
        except ToolqError:
            return False

    def cancel(self, call_id: str) -> CallResult:
        """Cancel the call (at once if queued or parked, cooperatively if running)."""
        return self.client.cancel(call_id, principal=self.principal)

    # -- decisions ---------------------------------------------------------------------------

    def approve(
        self,
        call_id: str,
        arguments: dict[str, Any] | None = None,
        by: str | None = None,
        *,
        note: str | None = None,
        digest: str | None = None,
        always: bool = False,
    ) -> None:
        """Approve a parked call, with ``arguments`` as an edit when they differ.

        A call decided already (say in the dashboard) is left as it is.
        """
        request = self.request(call_id)
        if request.status is not CallStatus.AWAITING_APPROVAL:
            return
        edit = arguments if arguments is not None and arguments != request.arguments else None
        # decided meanwhile by someone else: their decision stands
        with contextlib.suppress(NotAwaitingApprovalError):
            self.client.approvals.approve(
                call_id,
                by or self.approver,
                arguments=edit,
                note=note,
                digest=digest,
                always=always,
            )

    def deny(
        self, call_id: str, reason: str, by: str | None = None, *, always: bool = False
    ) -> None:
        """Deny a parked call with the reason the model reads; a decided call stays as it is."""
        with contextlib.suppress(NotAwaitingApprovalError):
            self.client.approvals.deny(call_id, by or self.approver, reason, always=always)

    def events(self, after: str | None = None) -> Iterator[Event]:
        """The run's events so far (progress included), after the stream id ``after``."""
        return self.client.events(self.run_id, after)


def is_settled_approval(status: CallStatus) -> bool:
    """True when a once-parked call was approved (it is queued, running or done running)."""
    return status in {
        CallStatus.QUEUED,
        CallStatus.RUNNING,
        CallStatus.SUCCEEDED,
        CallStatus.FAILED,
    }


def error_text(result: CallResult) -> str:
    """What the model reads for a call that did not succeed."""
    return text_of(outcome(result).blocks)


def output_of(result: CallResult) -> Any:
    """A successful call's output as plain JSON data (its text when there is no value)."""
    found = outcome(result)
    return found.value if found.value is not None else text_of(found.blocks)
