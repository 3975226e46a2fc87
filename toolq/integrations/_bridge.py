"""``Bridge``: one toolq run as a framework adapter drives it, one call per provider call id.

Every adapter dispatches each tool call on its own, under the framework's call id, so a
dispatch repeated after a resume (or in a new process) finds the same toolq call through
toolq's idempotency key instead of running a second one. A call id names one call: the call
found under an id must be of the same tool with the arguments the model sent for it, or the
adapter gets ``CallIdConflictError`` (the model reads it), never that call's approval or result.

An adapter is a submitter. It never approves or denies: an authenticated approver decides a
parked call (the HTTP API with their own token or a decision token, the dashboard, the CLI),
and the adapter reads toolq's state of the call when the framework resumes. So the agent
process never needs the approval signing key, and a Bridge over a client that holds one is
refused. No framework is imported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import uuid
from collections.abc import Iterator
from typing import Any, TypedDict

from toolq.approvals.models import ApprovalRequest
from toolq.approvals.policy import digest_arguments
from toolq.dispatch.async_client import AsyncClient
from toolq.dispatch.client import Client
from toolq.dispatch.providers.outcome import outcome, text_of
from toolq.dispatch.submission import Submission
from toolq.errors import (
    ApprovalPredicateError,
    CallIdConflictError,
    ConfigurationError,
    NotAuthorizedError,
    ReplicationError,
    SecretsError,
    ToolqError,
    WaitTimeoutError,
)
from toolq.models import CallEnvelope, CallResult, CallStatus, Event
from toolq.registry.tool import Tool
from toolq.secretbox import SecretBox, open_arguments
from toolq.settings import Settings

WAIT_SLICE = 1.0
"""Seconds one blocking wait lasts before it checks whether its waiter went away."""

DECIDED_IN_TOOLQ = (
    "an approver decides (and edits) it in toolq: ApprovalClient with their own token or a "
    "decision token, the dashboard, or `toolq approvals approve/deny`; then resume the "
    "framework with a plain approval"
)


def refuse_signing_key(settings: Settings) -> None:
    """Raise ``ConfigurationError`` when an agent process holds the approval signing key."""
    if settings.approval_signing_key is not None:
        raise ConfigurationError(
            "this agent process holds TOOLQ_APPROVAL_SIGNING_KEY: a framework adapter is a "
            "submitter and never decides calls, so it must not hold the key that signs "
            "approvals. Remove it from the agent's environment; approvers decide through the "
            "API (their own token or a decision token), the dashboard or the CLI"
        )


def refused_on_resume(call_id: str, what: str) -> NotAuthorizedError:
    """The error for a framework resume that tries to decide or edit a toolq call."""
    return NotAuthorizedError(
        f"call {call_id}: {what} is not applied: a framework resume never decides or edits a "
        f"toolq call; {DECIDED_IN_TOOLQ}",
        call_id=call_id,
    )


class BridgeOptions(TypedDict, total=False):
    """What every adapter takes for its ``Bridge`` (its keyword arguments)."""

    run_id: str | None
    """The toolq run every call goes to (else the framework's run, or a new one)."""
    principal: str | None
    """Who dispatches (and cancels) the calls."""
    behavior: str | None
    """The agent behaviour the calls run under."""
    submission: Submission | None
    """The rest of the dispatch (its tenant...): the keywords above stand in for its fields."""


class Bridge:
    """Dispatches, waits for, withdraws and cancels the calls of one toolq run.

    Every call goes out with one ``Submission`` (``Client.submit``): ``submission`` (its
    tenant, principal, behaviour, run), with ``run_id``, ``principal`` and ``behavior`` in
    place of its own when given; a new run when it names none.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        run_id: str | None = None,
        principal: str | None = None,
        behavior: str | None = None,
        submission: Submission | None = None,
    ) -> None:
        self.client = client.sync if isinstance(client, AsyncClient) else client
        refuse_signing_key(self.client.settings)
        given = submission or Submission()
        if given.idempotency_key is not None or given.format is not None:
            raise ConfigurationError(
                "an adapter dispatches each call under the model's own call id, in its own "
                "format: its Submission takes no idempotency_key or format"
            )
        self.fixed_run = (run_id or given.run_id) is not None
        """Whether the run was given (else each framework run may name its own)."""
        self.submission = dataclasses.replace(
            given,
            run_id=run_id or given.run_id or uuid.uuid4().hex,
            principal=principal if principal is not None else given.principal,
            behavior=behavior if behavior is not None else given.behavior,
        )

    @property
    def run_id(self) -> str:
        """The toolq run every call goes to."""
        assert self.submission.run_id is not None
        return self.submission.run_id

    @property
    def principal(self) -> str | None:
        """Who dispatches (and cancels) the calls."""
        return self.submission.principal

    def with_run(self, run_id: str) -> Bridge:
        """The same settings on another toolq run."""
        return Bridge(self.client, submission=dataclasses.replace(self.submission, run_id=run_id))

    # -- calls -------------------------------------------------------------------------------

    def submit(self, tool_call_id: str, name: str, arguments: dict[str, Any]) -> CallResult:
        """Dispatch one call (or find the one dispatched before under this id); its state now.

        ``arguments`` are the model's own. Raises ``CallIdConflictError`` when the id names
        a call of another tool or with other arguments.
        """
        payload = [{"id": tool_call_id, "name": name, "arguments": arguments}]
        batch = self.client.submit(payload, self.submission)
        ref = batch.calls[0]
        if ref.duplicate:
            self._check_same(ref.call_id, tool_call_id, name, arguments)
        if ref.status.is_final:  # (read by the wait: confirmed by the replicas, if any)
            return self.client.wait([ref.call_id], run_id=self.run_id)[0]
        return CallResult(
            call_id=ref.call_id,
            tool_call_id=ref.tool_call_id,
            name=name,
            status=ref.status,
            run_id=self.run_id,
        )

    def find(self, tool_call_id: str, name: str, arguments: dict[str, Any]) -> CallResult | None:
        """The run's call for a provider call id, or None if none was dispatched.

        Raises ``CallIdConflictError`` when the id names a call of another tool or with
        other arguments.
        """
        for result in self.calls():
            if result.tool_call_id == tool_call_id:
                self._check_same(result.call_id, tool_call_id, name, arguments)
                return result
        return None

    def _check_same(
        self, call_id: str, tool_call_id: str, name: str, arguments: dict[str, Any]
    ) -> None:
        cell = self.client.cell_for_call(call_id)
        envelope = cell.store.envelope(call_id)
        tool = self.client.registry.get(name)
        if envelope.name != name or not _sent_with(cell.dispatcher.box, tool, envelope, arguments):
            raise CallIdConflictError(
                f"tool call id {tool_call_id!r} already names another call in this run (of "
                "another tool, or with other arguments); a call id names one call: this call "
                "was not run",
                tool_call_id=tool_call_id,
                run_id=self.run_id,
            )

    def request(self, call_id: str) -> ApprovalRequest:
        """A call as approvers see it (secrets masked)."""
        return self.client.approvals.get(call_id)

    def asked(self, call_id: str) -> int:
        """How many interrupts a framework made for the call so far (``set_asked``)."""
        cell = self.client.cell_for_call(call_id)
        return int(cell.redis.get(cell.keys.asked(call_id)) or 0)

    def set_asked(self, call_id: str, count: int) -> None:
        """Record ``count`` interrupts made for the call (kept as long as finished calls)."""
        cell = self.client.cell_for_call(call_id)
        cell.redis.set(cell.keys.asked(call_id), count, ex=cell.settings.result_ttl)

    def calls(self) -> list[CallResult]:
        """The run's calls as they are now, to find one by its provider id.

        Read unfenced: which calls there are, not their outcomes (a final one is reported
        through ``status`` or ``wait``, which ``TOOLQ_MIN_REPLICAS_ACK`` confirms).
        """
        cell = self.client.cell_for_run(self.run_id)
        return cell.store.results(cell.store.run_call_ids(self.run_id), confirm=False)

    def status(self, call_id: str) -> CallResult:
        """The call's current state (and outcome, once final and confirmed).

        A call final on the master that the replicas have not confirmed yet
        (``TOOLQ_MIN_REPLICAS_ACK``) is waited for until they do.
        """
        try:
            return self.client.result(call_id)
        except ReplicationError:
            return self.wait(call_id)

    def wait(self, call_id: str, stop: threading.Event | None = None) -> CallResult:
        """Block until the call is final (or ``stop`` is set: its current state).

        A parked call is final once an approver denied it or its deadline passed, or once
        it ran after they approved it.
        """
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
    def cancelled_with_task(self, call_id: str, *, keep_parked: bool = False) -> Iterator[None]:
        """Cancel the call when the task awaiting inside this block is cancelled.

        The cancel is one quick Redis write made at once, so it lands even while the
        event loop shuts down. With ``keep_parked``, a call still awaiting approval is left
        parked: the task only waited for a person, and withdrawing is the app's say
        (a resume finds the call again).
        """
        try:
            yield
        except asyncio.CancelledError:
            if keep_parked:
                # unfenced: whether a person still has to decide, not an outcome
                cell = self.client.cell_for_call(call_id)
                [current] = cell.store.results([call_id], confirm=False)
                if current.status is CallStatus.AWAITING_APPROVAL:
                    raise
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

    def withdraw(self, call_id: str) -> CallResult:
        """The framework said no: cancel the call unless it is final already; its state now.

        Not a denial (no approver decided): the call ends ``cancelled``. A call an approver
        approved that is running is cancelled cooperatively; a finished one stays as it is
        (its state is returned as the master has it, confirmed by the replicas or not).
        """
        # unfenced: a call final on the master is not cancelled, confirmed or not
        [current] = self.client.cell_for_call(call_id).store.results([call_id], confirm=False)
        return current if current.status.is_final else self.cancel(call_id)

    def events(self, after: str | None = None) -> Iterator[Event]:
        """The run's events so far (progress included), after the stream id ``after``."""
        return self.client.events(self.run_id, after)


def _sent_with(
    box: SecretBox | None, tool: Tool | None, envelope: CallEnvelope, arguments: dict[str, Any]
) -> bool:
    """Whether ``arguments`` are what the model sent for the stored call (before any edit)."""
    first = envelope.original_arguments
    sent = envelope.arguments if first is None else first
    if tool is None:
        return digest_arguments(sent) == digest_arguments(arguments)
    try:
        opened = open_arguments(box, tool, envelope.call_id, sent)
    except SecretsError:
        # A call that will never run is stored with its secrets masked, not sealed.
        masked = tool.redact(arguments, conservative=True)
        return digest_arguments(tool.redact(sent, conservative=True)) == digest_arguments(masked)
    return digest_arguments(opened) == digest_arguments(arguments)


def is_settled_approval(status: CallStatus) -> bool:
    """True when a once-parked call was approved (it is queued, running or done running)."""
    return status in {
        CallStatus.QUEUED,
        CallStatus.RUNNING,
        CallStatus.SUCCEEDED,
        CallStatus.FAILED,
        CallStatus.UNKNOWN,
    }


def error_text(result: CallResult) -> str:
    """What the model reads for a call that did not succeed."""
    return text_of(outcome(result).blocks)


def output_of(result: CallResult) -> Any:
    """A successful call's output as plain JSON data (its text when there is no value)."""
    found = outcome(result)
    return found.value if found.value is not None else text_of(found.blocks)
