"""``AsyncClient``, ``AsyncBatch``, ``AsyncApprovals``: the clients for asyncio code.

Each method takes exactly the parameters of its blocking twin (a test compares the
signatures) and runs it in a worker thread, so the event loop never blocks on Redis.
Event streams are ``async for`` iterators fed by a thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import redis

from toolq.approvals.models import ApprovalRequest, AuditEntry
from toolq.approvals.policy import ApprovalMode, RunRules
from toolq.approvals.store import ApprovalStore
from toolq.backend import Backend
from toolq.cells import Cell
from toolq.dispatch.client import Batch, Client
from toolq.dispatch.dispatcher import CallRef
from toolq.dispatch.providers.streams import StreamedCalls
from toolq.dispatch.submission import Submission
from toolq.errors import ToolqError
from toolq.models import CallResult, Event, ProviderFormat, Resolution, RiskLevel
from toolq.quotas import DEFAULT_TENANT
from toolq.registry.registry import ToolRegistry
from toolq.results.paging import DEFAULT_LIMIT, Page
from toolq.results.runs import RunSummary
from toolq.settings import Settings

T = TypeVar("T")


class AsyncClient:
    """Dispatches tool calls to workers and collects their results and events, awaited."""

    def __init__(
        self,
        registry: ToolRegistry,
        settings: Settings | None = None,
        *,
        redis_client: redis.Redis | None = None,
        backend: Backend | None = None,
    ) -> None:
        """Build over ``backend`` (made for ``registry``), or a new ``Backend(settings, registry)``.

        ``redis_client`` replaces the Redis client a new backend would connect; ``close``
        closes the backend either way.
        """
        self.sync = Client(registry, settings, redis_client=redis_client, backend=backend)
        """The blocking ``Client`` every method runs in a thread."""
        self.approvals = AsyncApprovals(self.sync.approvals)

    async def dispatch(
        self,
        payload: Any,
        *,
        run_id: str | None = None,
        behavior: str | None = None,
        idempotency_key: str | None = None,
        principal: str | None = None,
        format: ProviderFormat | str | None = None,
        admin: bool = False,
        tenant: str = DEFAULT_TENANT,
    ) -> AsyncBatch:
        """Parse the tool calls in ``payload`` and queue or park each; returns once stored.

        The run belongs to the ``principal`` whose dispatch created it (``None`` included):
        dispatching into a run another principal owns raises ``NotRunOwnerError`` unless
        ``admin``. The calls are run for ``tenant`` (its budget is charged); a run belongs
        to one tenant, and an invalid name raises ``InvalidTenantError``.
        """
        batch = await asyncio.to_thread(
            self.sync.dispatch,
            payload,
            run_id=run_id,
            behavior=behavior,
            idempotency_key=idempotency_key,
            principal=principal,
            format=format,
            admin=admin,
            tenant=tenant,
        )
        return AsyncBatch(batch)

    async def submit(self, payload: Any, submission: Submission) -> AsyncBatch:
        """``dispatch`` with its settings in one ``Submission``, passed along whole."""
        return AsyncBatch(await asyncio.to_thread(self.sync.submit, payload, submission))

    async def dispatch_stream(
        self,
        stream: Any,
        *,
        run_id: str | None = None,
        behavior: str | None = None,
        principal: str | None = None,
        admin: bool = False,
        tenant: str = DEFAULT_TENANT,
    ) -> list[AsyncBatch]:
        """Dispatch each tool call of a streamed model response as soon as it is complete.

        ``stream``: an async iterable (an SDK's ``AsyncStream``) or a plain iterable of the
        events ``Client.dispatch_stream`` reads. Every call goes into one run; one
        ``AsyncBatch`` per call, in stream order; a call the stream broke off inside is not
        dispatched.
        """
        calls = StreamedCalls()
        batches: list[AsyncBatch] = []

        async def events() -> AsyncIterator[Any]:
            if hasattr(stream, "__aiter__"):
                async for event in stream:
                    yield event
            else:
                for event in stream:
                    yield event

        async for event in events():
            for call in calls.feed(event):
                batch = await self.dispatch(
                    [call],
                    run_id=run_id,
                    behavior=behavior,
                    principal=principal,
                    format=calls.format,
                    admin=admin,
                    tenant=tenant,
                )
                run_id = batch.run_id
                batches.append(batch)
        return batches

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        run_id: str | None = None,
        behavior: str | None = None,
        principal: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> CallResult:
        """Dispatch one call and wait for its final result."""
        return await asyncio.to_thread(
            self.sync.call,
            name,
            arguments,
            timeout=timeout,
            run_id=run_id,
            behavior=behavior,
            principal=principal,
            tenant=tenant,
        )

    async def wait(
        self, call_ids: Sequence[str], *, timeout: float | None = None, run_id: str | None = None
    ) -> list[CallResult]:
        """Wait until the calls (of one run) are final; results in the given order.

        Raises ``WaitTimeoutError`` (the calls go on) when ``timeout`` runs out first.
        """
        return await asyncio.to_thread(self.sync.wait, call_ids, timeout=timeout, run_id=run_id)

    async def cell_for_run(self, run_id: str) -> Client:
        """The blocking single-cell client of the run's cell (``Client.cell_for_run``)."""
        return await asyncio.to_thread(self.sync.cell_for_run, run_id)

    async def cell_for_call(self, call_id: str) -> Client:
        """The blocking single-cell client of the call's cell (``Client.cell_for_call``)."""
        return await asyncio.to_thread(self.sync.cell_for_call, call_id)

    async def reachable(self) -> tuple[list[tuple[int | None, Client]], list[Cell]]:
        """The cells that answer and those that do not (``Client.reachable``)."""
        return await asyncio.to_thread(self.sync.reachable)

    async def result(self, call_id: str) -> CallResult:
        """A call's current state and, once final, its outcome."""
        return await asyncio.to_thread(self.sync.result, call_id)

    async def results(self, run_id: str) -> list[CallResult]:
        """Current results of every call of a run, in dispatch order."""
        return await asyncio.to_thread(self.sync.results, run_id)

    def events(
        self,
        run_id: str,
        after: str | None = None,
        *,
        follow: bool = False,
        timeout: float | None = None,
    ) -> AsyncIterator[Event]:
        """A run's events after ``after`` (exclusive); ``follow`` keeps streaming new ones."""
        return _aiter(lambda: self.sync.events(run_id, after, follow=follow, timeout=timeout))

    async def to_messages(
        self, run_id: str, format: ProviderFormat | str | None = None
    ) -> list[dict[str, Any]]:
        """A run's current results as provider tool-result messages."""
        return await asyncio.to_thread(self.sync.to_messages, run_id, format)

    async def calls_page(
        self, run_id: str, *, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> Page[CallResult]:
        """A page of a run's calls in dispatch order (``Client.calls_page``)."""
        return await asyncio.to_thread(self.sync.calls_page, run_id, limit=limit, cursor=cursor)

    async def runs(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
        tenant: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> Page[RunSummary]:
        """Runs, most recently dispatched into first, with their calls by status."""
        return await asyncio.to_thread(
            self.sync.runs, limit=limit, cursor=cursor, tenant=tenant, since=since, until=until
        )

    async def run(self, run_id: str) -> RunSummary:
        """One run's summary (``RunNotFoundError`` for a run with no calls left)."""
        return await asyncio.to_thread(self.sync.run, run_id)

    async def retry(
        self, call_id: str, *, principal: str | None = None, admin: bool = False
    ) -> CallResult:
        """Retry a failed, denied, expired or cancelled call as a new one (``Client.retry``)."""
        return await asyncio.to_thread(self.sync.retry, call_id, principal=principal, admin=admin)

    async def cancel(
        self, call_id: str, *, principal: str | None = None, admin: bool = False
    ) -> CallResult:
        """Cancel a call: at once if queued or parked, cooperatively if running.

        Only the run's owner (or ``admin``) may; others get ``NotRunOwnerError``.
        """
        return await asyncio.to_thread(self.sync.cancel, call_id, principal=principal, admin=admin)

    async def resolve_unknown(
        self,
        call_id: str,
        outcome: Resolution | str,
        *,
        by: str,
        note: str | None = None,
        result: str | None = None,
    ) -> CallResult:
        """Resolve a call of unknown outcome (``Client.resolve_unknown``)."""
        return await asyncio.to_thread(
            self.sync.resolve_unknown, call_id, outcome, by=by, note=note, result=result
        )

    async def undo(
        self,
        call_id: str,
        timeout: float | None = 30,
        *,
        principal: str | None = None,
        admin: bool = False,
    ) -> Event:
        """Run the call's undo handler on a worker of its risk level; the ``call.undone`` event.

        Only the run's owner (or ``admin``) may (``NotRunOwnerError``). Raises ``UndoError``
        when there is nothing to undo, it was undone already, or the handler failed.
        """
        return await asyncio.to_thread(
            self.sync.undo, call_id, timeout, principal=principal, admin=admin
        )

    async def undo_gate(self, call_id: str) -> RiskLevel | None:
        """The risk whose approver role undoing this call needs; ``None`` if it is not gated."""
        return await asyncio.to_thread(self.sync.undo_gate, call_id)

    async def close(self) -> None:
        """Release connections."""
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncBatch:
    """The calls of one ``AsyncClient.dispatch``, in call order."""

    def __init__(self, batch: Batch) -> None:
        self.sync = batch
        """The blocking ``Batch`` every method runs in a thread."""
        self.run_id = batch.run_id
        self.calls: list[CallRef] = batch.calls
        self.format = batch.format

    @property
    def call_ids(self) -> list[str]:
        """Call ids in call order."""
        return self.sync.call_ids

    def __len__(self) -> int:
        return len(self.calls)

    def __iter__(self) -> Iterator[CallRef]:
        return iter(self.calls)

    async def wait(self, timeout: float | None = None) -> list[CallResult]:
        """Wait until every call is final; results in call order.

        Raises ``WaitTimeoutError`` (the calls go on) when ``timeout`` runs out first.
        """
        return await asyncio.to_thread(self.sync.wait, timeout)

    async def results(self) -> list[CallResult]:
        """Current results in call order, final or not."""
        return await asyncio.to_thread(self.sync.results)

    def events(
        self, after: str | None = None, *, follow: bool = True, timeout: float | None = None
    ) -> AsyncIterator[Event]:
        """The run's events; with ``follow`` keep streaming until every call is final."""
        return _aiter(lambda: self.sync.events(after, follow=follow, timeout=timeout))

    async def to_messages(self, format: ProviderFormat | str | None = None) -> list[dict[str, Any]]:
        """Current results as the provider's tool-result messages (default: the input format).

        After ``wait`` these are the results it returned, not read again.
        """
        return await asyncio.to_thread(self.sync.to_messages, format)


class AsyncApprovals:
    """``AsyncClient.approvals``: list, decide and set rules for parked calls, awaited."""

    def __init__(self, approvals: ApprovalStore) -> None:
        self.sync = approvals
        """The blocking ``ApprovalStore`` every method runs in a thread."""

    async def pending(
        self,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
    ) -> list[ApprovalRequest]:
        """Calls awaiting a decision, soonest deadline first, optionally filtered."""
        return await asyncio.to_thread(self.sync.pending, run_id, risk, tool)

    async def page(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
        since: float | None = None,
        until: float | None = None,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
        tenant: str | None = None,
    ) -> Page[ApprovalRequest]:
        """One page of calls awaiting a decision, oldest parked first (``ApprovalStore.page``)."""
        return await asyncio.to_thread(
            self.sync.page,
            limit=limit,
            cursor=cursor,
            since=since,
            until=until,
            run_id=run_id,
            risk=risk,
            tool=tool,
            tenant=tenant,
        )

    async def get(self, call_id: str) -> ApprovalRequest:
        """A call as approvers see it (any state)."""
        return await asyncio.to_thread(self.sync.get, call_id)

    async def audit(self, count: int = 100, after: str | None = None) -> list[AuditEntry]:
        """Audit entries, oldest first, after the stream id ``after``."""
        return await asyncio.to_thread(self.sync.audit, count, after)

    async def approve(
        self,
        call_id: str,
        by: str,
        *,
        arguments: dict[str, Any] | None = None,
        note: str | None = None,
        digest: str | None = None,
        always: bool = False,
    ) -> CallResult:
        """Approve a parked call (optionally with edited arguments) and enqueue it.

        ``digest`` names the arguments the approver saw; if they changed, the decision is
        refused. ``always`` also approves this tool for the rest of the run.
        """
        return await asyncio.to_thread(
            self.sync.approve,
            call_id,
            by,
            arguments=arguments,
            note=note,
            digest=digest,
            always=always,
        )

    async def deny(
        self, call_id: str, by: str, reason: str = "", *, always: bool = False
    ) -> CallResult:
        """Deny a parked call; the model reads ``reason``; ``always`` denies it for the run."""
        return await asyncio.to_thread(self.sync.deny, call_id, by, reason, always=always)

    async def unknown(self, run_id: str | None = None) -> list[ApprovalRequest]:
        """Calls of unknown outcome, longest lost first (``ApprovalStore.unknown``)."""
        return await asyncio.to_thread(self.sync.unknown, run_id)

    async def decide_run(
        self,
        run_id: str,
        by: str,
        *,
        approve: Sequence[str] = (),
        deny: Mapping[str, str] | None = None,
    ) -> dict[str, CallResult | ToolqError]:
        """Decide several parallel calls of a run; each gets its result or its error."""
        return await asyncio.to_thread(self.sync.decide_run, run_id, by, approve=approve, deny=deny)

    async def approve_run(
        self,
        run_id: str,
        by: str,
        *,
        may: Callable[[ApprovalRequest], ToolqError | None] | None = None,
    ) -> dict[str, CallResult | ToolqError]:
        """Approve every call of a run awaiting a decision (``ApprovalStore.approve_run``)."""
        return await asyncio.to_thread(self.sync.approve_run, run_id, by, may=may)

    async def rules(self, run_id: str) -> RunRules:
        """A run's approval rules."""
        return await asyncio.to_thread(self.sync.rules, run_id)

    async def set_rules(
        self,
        run_id: str,
        *,
        mode: ApprovalMode | str | None = None,
        approve_tools: Sequence[str] | None = None,
        approval_timeout: float | None = None,
        by: str | None = None,
        principal: str | None = None,
        admin: bool = False,
        tenant: str | None = None,
    ) -> RunRules:
        """Set a run's mode (strict/permissive/auto), its approval list or its deadline.

        A change that loosens the gate needs ``by``, an approver of the right risk; only the
        run's owner (or ``admin``) may change the rules (``NotRunOwnerError``).
        """
        return await asyncio.to_thread(
            self.sync.set_rules,
            run_id,
            mode=mode,
            approve_tools=approve_tools,
            approval_timeout=approval_timeout,
            by=by,
            principal=principal,
            admin=admin,
            tenant=tenant,
        )

    async def export_state(self, run_id: str) -> dict[str, Any]:
        """A run's approval state (mode, lists, sticky decisions) to save."""
        return await asyncio.to_thread(self.sync.export_state, run_id)

    async def restore_state(
        self,
        run_id: str,
        state: dict[str, Any],
        *,
        by: str | None = None,
        principal: str | None = None,
        admin: bool = False,
        tenant: str | None = None,
    ) -> RunRules:
        """Restore a saved approval state onto a run (owner or ``admin`` only).

        A state that loosens the gate is signed again here, by ``by``, who must be an
        approver for each tool's risk (DANGEROUS for mode ``auto``).
        """
        return await asyncio.to_thread(
            self.sync.restore_state,
            run_id,
            state,
            by=by,
            principal=principal,
            admin=admin,
            tenant=tenant,
        )


async def _aiter(make: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    """Drive a blocking iterator in a thread and hand its items to the event loop."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    stop = threading.Event()

    def pump() -> None:
        try:
            for item in make():
                if stop.is_set():
                    return
                loop.call_soon_threadsafe(queue.put_nowait, ("item", item))
            loop.call_soon_threadsafe(queue.put_nowait, ("end", None))
        except BaseException as exc:
            loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))

    thread = threading.Thread(target=pump, daemon=True, name="toolq-events")
    thread.start()
    try:
        while True:
            kind, value = await queue.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
