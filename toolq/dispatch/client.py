"""``Client`` and ``Batch``: dispatch, wait, stream events, cancel, approve, undo.

A ``Client`` works on one Redis (one cell). With ``TOOLQ_SHARDS``, ``Client(registry,
settings)`` builds a ``CellRouter`` instead (``toolq.dispatch.router``): a ``Client`` with the
same methods that sends each run and call to its cell's ``Client``. Code that takes a
``Client`` never asks which of the two it has: a listing asks ``reachable`` for the cells to
read, a lookup asks ``cell_for_run`` or ``cell_for_call`` for the one client that holds it.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from toolq.approvals.authority import decided_risk
from toolq.approvals.models import UndoData
from toolq.approvals.policy import RunRules, digest_call
from toolq.approvals.resolving import resolve
from toolq.approvals.store import ApprovalStore
from toolq.approvals.undoing import (
    check_reader,
    held_approvals,
    sign_undo,
    undo_digest,
    undo_text,
)
from toolq.backend import Backend
from toolq.dispatch.dispatcher import CallRef, Dispatched, Dispatcher
from toolq.dispatch.providers import to_messages
from toolq.dispatch.providers.streams import StreamedCalls
from toolq.dispatch.retry import retry_call
from toolq.dispatch.submission import Submission
from toolq.errors import (
    ApprovalPredicateError,
    CallCancelledError,
    CallNotFoundError,
    ConfigurationError,
    DigestMismatchError,
    ReplicationError,
    SecretsError,
    UndoAwaitingApprovalsError,
    UndoError,
    WaitTimeoutError,
)
from toolq.models import (
    CallEnvelope,
    CallResult,
    CallStatus,
    Event,
    EventType,
    ProviderFormat,
    Resolution,
    RiskLevel,
)
from toolq.quotas import DEFAULT_TENANT
from toolq.redis_failures import translated
from toolq.redis_target import RedisTarget
from toolq.registry.registry import ToolRegistry
from toolq.results.paging import DEFAULT_LIMIT, Page
from toolq.results.runs import RunSummary, run_summary, runs_page
from toolq.results.store import dumps
from toolq.results.undos import REFUSALS
from toolq.results.waits import Waiter
from toolq.secretbox import open_arguments
from toolq.settings import Settings

if TYPE_CHECKING:
    # Imported only when a history store is configured (it loads SQLAlchemy).
    from toolq.history.store import HistoryStore

T = TypeVar("T")


@dataclass(frozen=True)
class CellState:
    """One cell of ``TOOLQ_SHARDS``: its index, its address, and whether it answers."""

    index: int
    where: str
    up: bool

    @property
    def name(self) -> str:
        """``cell N (address)`` for messages."""
        return f"cell {self.index} ({self.where})"


class Batch:
    """The calls of one ``dispatch``, in call order."""

    def __init__(self, client: Client, dispatched: Dispatched) -> None:
        self._client = client
        self.guard: Callable[[], AbstractContextManager[None]] = nullcontext
        """Wraps each read: with cells, the run's cell's guard (a cell lost mid-way raises
        ``CellUnavailableError``)."""
        self._first_event = dispatched.first_event
        self._notify = dispatched.notify
        self.run_id = dispatched.run_id
        self.calls: list[CallRef] = dispatched.calls
        self.format = dispatched.format
        self._final: list[CallResult] | None = None
        """What ``wait`` returned: final results never change, so they are kept."""

    @property
    def call_ids(self) -> list[str]:
        """Call ids in call order."""
        return [c.call_id for c in self.calls]

    def __len__(self) -> int:
        return len(self.calls)

    def __iter__(self) -> Iterator[CallRef]:
        return iter(self.calls)

    def wait(self, timeout: float | None = None) -> list[CallResult]:
        """Block until every call is final; results in call order.

        Raises ``WaitTimeoutError`` (the calls go on) when ``timeout`` runs out first.
        """
        if self._final is None:
            with self.guard():
                self._final = self._wait(timeout)
        return list(self._final)

    def _wait(self, timeout: float | None) -> list[CallResult]:
        if self._first_event is None:
            return self._client.wait(self.call_ids, timeout=timeout, run_id=self.run_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        waiter = self._start_wait()
        if not self._client.log.waits.wait(waiter, timeout):
            raise WaitTimeoutError(
                f"{len(waiter.pending)} of {len(self.calls)} calls not final after {timeout:g}s",
                pending=sorted(waiter.pending),
            )
        results = self._collect(waiter.seen)
        return self._client._confirmed(self.run_id, self.call_ids, results, deadline)

    def _start_wait(self) -> Waiter:
        """Register this batch's wait with the client's shared reader."""
        assert self._first_event is not None
        final = {c.call_id for c in self.calls if c.status.is_final}
        return self._client.log.start_wait(
            self.run_id, self.call_ids, after=self._first_event, final=final, inbox=self._notify
        )

    def _collect(self, seen: dict[str, dict[str, Any]]) -> list[CallResult]:
        """The results once every call is final; ``seen``: the final events' data by call id."""
        # Final events that carry the whole outcome save reading the records back.
        missing = [c for c in self.call_ids if not seen.get(c, {}).get("complete")]
        fetched = (
            # unconfirmed: the wait confirms them (``Client._confirmed``)
            dict(zip(missing, self._client.store.results(missing, confirm=False), strict=True))
            if missing
            else {}
        )
        return [
            fetched.get(ref.call_id) or self._from_event(ref, seen[ref.call_id])
            for ref in self.calls
        ]

    def _from_event(self, ref: CallRef, data: dict[str, Any]) -> CallResult:
        return CallResult(
            call_id=ref.call_id,
            tool_call_id=ref.tool_call_id,
            name=ref.name,
            status=CallStatus(data["status"]),
            output=data.get("output"),
            error=data.get("error"),
            error_type=data.get("error_type"),
            duration_ms=data.get("duration_ms"),
            attempts=data.get("attempts", 0),
            format=ref.format,
            run_id=self.run_id,
            rpc_id=ref.rpc_id,
        )

    def results(self) -> list[CallResult]:
        """Current results in call order, final or not."""
        with self.guard():
            return self._client.store.results(self.call_ids)

    def events(
        self, after: str | None = None, *, follow: bool = True, timeout: float | None = None
    ) -> Iterator[Event]:
        """The run's events; with ``follow`` keep streaming until every call is final."""
        with self.guard():
            yield from self._events(after, follow, timeout)

    def _events(self, after: str | None, follow: bool, timeout: float | None) -> Iterator[Event]:
        if not follow:
            yield from self._client.events(self.run_id, after=after)
            return
        pending = set(self.call_ids)
        try:
            statuses = self._client.store.statuses(self.call_ids)
        except ReplicationError:  # a call final on the master alone: followed until confirmed
            statuses = [None] * len(self.call_ids)
        for status, call_id in zip(statuses, self.call_ids, strict=True):
            if status is not None and status.is_final:
                pending.discard(call_id)

        def done(event: Event) -> bool:
            if event.type.is_final:
                pending.discard(event.call_id)
            return not pending

        if not pending:
            yield from self._client.events(self.run_id, after=after)
            return
        yield from self._client.log.follow(self.run_id, after, stop=done, timeout=timeout)

    def to_messages(self, format: ProviderFormat | str | None = None) -> list[dict[str, Any]]:
        """Current results as the provider's tool-result messages (default: the input format).

        After ``wait`` these are the results it returned, not read again.
        """
        fmt = format or self.format or ProviderFormat.OPENAI
        results = self._final if self._final is not None else self.results()
        return to_messages(results, fmt)


class Client:
    """Dispatches tool calls to workers and collects their results and events (one Redis).

    ``Client(registry, settings)`` with ``TOOLQ_SHARDS`` set (and neither ``backend`` nor
    ``redis_client`` given) is a ``CellRouter``: the same methods over one ``Client`` per cell.
    """

    def __new__(
        cls, registry: ToolRegistry, settings: Settings | None = None, **one: Any
    ) -> Client:
        """With ``TOOLQ_SHARDS`` (and no backend or Redis client given): a ``CellRouter``."""
        one_redis = any(given is not None for given in one.values())
        if cls is Client and not one_redis and (settings or Settings()).shards:
            from toolq.dispatch.router import CellRouter  # the router is a Client

            cls = CellRouter
        return super().__new__(cls)

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
        if backend is not None and backend.registry is not registry:
            raise ConfigurationError("the client's backend was built for another registry")
        chosen = backend.settings if backend is not None else (settings or Settings())
        self.backend = backend or Backend(
            chosen,
            registry,
            redis_client=redis_client,
            max_connections=chosen.client_max_connections,
        )
        self.registry = registry
        self.settings = self.backend.settings
        self.keys = self.backend.keys
        self.redis = self.backend.redis
        self.store = self.backend.store
        self.log = self.backend.log
        self.celery = self.backend.celery
        self.publisher = self.backend.publisher
        self.policy = self.backend.policy
        self.owners = self.backend.owners
        self.dispatcher = Dispatcher(
            registry,
            self.store,
            self.publisher,
            self.settings,
            self.policy,
            owners=self.owners,
            pace=self.log.waits.pace,
        )
        self.undos = self.backend.undos
        self.approval_store: ApprovalStore = self.backend.approvals
        self.approvals = self.approval_store

    # -- where runs and calls live (a ``CellRouter`` answers for each cell) -------------------

    @property
    def cell_clients(self) -> list[Client]:
        """The one-Redis client of each cell, in cell order: this client alone."""
        return [self]

    def cell_for_run(self, run_id: str) -> Client:
        """The one-Redis client holding ``run_id``: this client.

        A ``CellRouter`` answers with its cell's, or raises ``CellUnavailableError`` when that
        cell does not answer.
        """
        return self

    def cell_for_call(self, call_id: str) -> Client:
        """The one-Redis client holding ``call_id``: this client."""
        return self

    def reachable(
        self, run_id: str | None = None
    ) -> tuple[list[tuple[int | None, Client]], list[CellState]]:
        """For listings that merge cells: the cells to read, and those that do not answer.

        Each cell to read as (its index, its client); with ``run_id``, only that run's cell
        (its index ``None``). One Redis: ``[(None, self)], []``.
        """
        return [(None, self)], []

    def cell_states(self) -> list[CellState]:
        """Every cell of ``TOOLQ_SHARDS`` and whether it answers; none without cells."""
        return []

    def each_cell(self) -> list[tuple[int | None, Client]]:
        """Every cell as (its index, its client), answering or not; one Redis: ``(None, self)``."""
        return [(None, self)]

    @property
    def redis_target(self) -> RedisTarget | None:
        """The one Redis every request checks first (the API's gate): this client's.

        A ``CellRouter`` has none: each request checks the cells it touches.
        """
        return RedisTarget.of(self.settings)

    @property
    def history(self) -> HistoryStore | None:
        """The history store (``TOOLQ_HISTORY_URL``), or ``None`` without one."""
        return self.backend.history

    def dispatch(
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
    ) -> Batch:
        """Parse the tool calls in ``payload`` and queue or park each; returns at once.

        The run belongs to the ``principal`` whose dispatch created it (``None`` included):
        dispatching into a run another principal owns raises ``NotRunOwnerError`` unless
        ``admin``. The calls are run for ``tenant`` (its budget is charged); a run belongs
        to one tenant, and an invalid name raises ``InvalidTenantError``. With cells the run
        goes to its cell (``cell_for_run``). A Redis that refuses writes (full, read-only)
        raises ``StoreUnavailableError`` and nothing is queued; wrong credentials raise
        ``RedisAuthError``.
        """
        return self.submit(
            payload,
            Submission(
                run_id=run_id,
                principal=principal,
                tenant=tenant,
                behavior=behavior,
                idempotency_key=idempotency_key,
                format=format,
                admin=admin,
            ),
        )

    @functools.cached_property
    def _where(self) -> str:
        """The Redis errors name (``RedisTarget.describe``): found once, not per dispatch."""
        return RedisTarget.of(self.settings).describe()

    def submit(self, payload: Any, submission: Submission) -> Batch:
        """``dispatch`` with its settings in one ``Submission``, passed along whole."""
        # A full or read-only Redis refuses the calls at once (StoreUnavailableError): each
        # call's record and message are written by one script, so none is half-written.
        # Once this client waited on a batch, its new calls name its reader's inbox.
        waits = self.log.waits
        if submission.notify is None and waits.inbox_used:
            submission = dataclasses.replace(submission, notify=waits.inbox)
        with translated(self._where, unreachable=False):
            dispatched = self.dispatcher.dispatch(payload, submission)
        return Batch(self, dispatched)

    def dispatch_stream(
        self,
        stream: Any,
        *,
        run_id: str | None = None,
        behavior: str | None = None,
        principal: str | None = None,
        admin: bool = False,
        tenant: str = DEFAULT_TENANT,
    ) -> list[Batch]:
        """Dispatch each tool call of a streamed model response as soon as it is complete.

        ``stream`` iterates the events of OpenAI chat completion chunks, the OpenAI Responses
        stream or Anthropic's message stream (the SDKs' models or their dicts;
        ``StreamedCalls`` says when each call is complete). Every call goes into one run
        (``run_id``, or the run the first call creates); returns one ``Batch`` per call in
        stream order. A call the stream broke off inside is not dispatched: the stream's
        error propagates, and the calls completed before it are already queued.
        """
        calls = StreamedCalls()
        batches: list[Batch] = []
        for event in stream:
            for call in calls.feed(event):
                batch = self.dispatch(
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

    def call(
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
        payload = [{"id": f"call_{uuid.uuid4().hex}", "name": name, "arguments": arguments or {}}]
        batch = self.dispatch(
            payload, run_id=run_id, behavior=behavior, principal=principal, tenant=tenant
        )
        return batch.wait(timeout)[0]

    def wait(
        self, call_ids: Sequence[str], *, timeout: float | None = None, run_id: str | None = None
    ) -> list[CallResult]:
        """Block until the calls (of one run) are final; results in the given order."""
        ids = list(call_ids)
        if not ids:
            return []
        run = run_id or self.store.run_id(ids[0])
        if run is None:
            raise CallNotFoundError(f"unknown call id {ids[0]!r}", call_id=ids[0])
        deadline = None if timeout is None else time.monotonic() + timeout
        self.log.wait_final(run, ids, timeout)
        return self._confirmed(run, ids, self.store.results(ids, confirm=False), deadline)

    def _confirmed(
        self, run_id: str, ids: list[str], results: list[CallResult], deadline: float | None
    ) -> list[CallResult]:
        """``results`` once the replicas hold them (``TOOLQ_MIN_REPLICAS_ACK``), else as is.

        A final state is read from the master as soon as a worker wrote it, which may be
        before any replica has it; a failover then would take it back. So a wait ends only
        when the states are read again with a fence on the same connection
        (``CallStore.confirmed_results``) and the replicas acknowledge it. When they do not
        (the master went away), the calls not final on whichever master there is now are
        waited for again, until ``deadline`` (``time.monotonic()``; None: no end).
        """
        acks = self.store.acks
        while acks.enabled:
            try:  # the states and the fence from one master (``confirmed_results``)
                results, confirmed = self.store.confirmed_results(ids)
            except (redis.ConnectionError, redis.TimeoutError):  # a failover under way
                confirmed = False
            if confirmed and all(r.status.is_final for r in results):
                break
            if deadline is not None and time.monotonic() > deadline:
                pending = [r.call_id for r in results if not r.status.is_final] or ids
                raise WaitTimeoutError(
                    f"{len(pending)} of {len(ids)} calls not confirmed final by the replicas "
                    "in time",
                    pending=sorted(pending),
                )
            time.sleep(0.1)
            try:
                current = self.store.results(ids, confirm=False)
                pending = [r.call_id for r in current if not r.status.is_final]
            except (redis.ConnectionError, redis.TimeoutError):  # still no master: again
                continue
            if pending:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self.log.wait_final(run_id, pending, left)
        return results

    def result(self, call_id: str) -> CallResult:
        """A call's current state and, once final, its outcome."""
        return self.store.result(call_id)

    def results(self, run_id: str) -> list[CallResult]:
        """Current results of every call of a run, in dispatch order."""
        return self.store.results(self.store.run_call_ids(run_id))

    def calls_page(
        self, run_id: str, *, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> Page[CallResult]:
        """A page of a run's calls in dispatch order (``CallStore.calls_page``)."""
        return self.store.calls_page(run_id, limit=limit, cursor=cursor)

    def runs(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
        tenant: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> Page[RunSummary]:
        """Runs, most recently dispatched into first, with their calls by status.

        ``tenant``: that tenant's runs only; ``since``/``until``: last dispatched within
        (epoch seconds). With cells, the runs of every cell that answers, merged.
        """
        return runs_page(
            self.redis,
            self.store.scripts,
            self.keys,
            limit=limit,
            cursor=cursor,
            tenant=tenant,
            since=since,
            until=until,
            cold=self.store.cold,
        )

    def run(self, run_id: str) -> RunSummary:
        """One run's summary (``RunNotFoundError`` for a run with no calls left)."""
        return run_summary(self.redis, self.keys, run_id, self.store.cold)

    def retry(
        self, call_id: str, *, principal: str | None = None, admin: bool = False
    ) -> CallResult:
        """Dispatch a new call retrying a failed, denied, expired or cancelled one; its state.

        Same tool, arguments and run, through the dispatcher (approval applies again);
        ``retry_of``/``retried_by`` link the two. Run owner (or ``admin``) only.
        """
        new_id = retry_call(self.dispatcher, self.owners, call_id, principal=principal, admin=admin)
        return self.store.result(new_id)

    def events(
        self,
        run_id: str,
        after: str | None = None,
        *,
        follow: bool = False,
        timeout: float | None = None,
    ) -> Iterator[Event]:
        """A run's events after ``after`` (exclusive); ``follow`` keeps streaming new ones."""
        if follow:
            return self.log.follow(run_id, after, timeout=timeout)
        return iter(self.log.read(run_id, after))

    def to_messages(
        self, run_id: str, format: ProviderFormat | str | None = None
    ) -> list[dict[str, Any]]:
        """A run's current results as provider tool-result messages."""
        results = self.results(run_id)
        fmt = format or next((r.format for r in results if r.format), None) or ProviderFormat.OPENAI
        return to_messages(results, fmt)

    def cancel(
        self, call_id: str, *, principal: str | None = None, admin: bool = False
    ) -> CallResult:
        """Cancel a call: at once if queued or parked, cooperatively if running.

        Only the run's owner (or ``admin``) may; others get ``NotRunOwnerError``.
        """
        run = self.owners.check_call(call_id, principal, admin=admin, action="cancel calls of")
        if run is None:
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        ok, current = self.store.transition(
            call_id,
            from_states=[CallStatus.QUEUED, CallStatus.AWAITING_APPROVAL],
            to=CallStatus.CANCELLED,
            event=EventType.CANCELLED,
            data={"status": CallStatus.CANCELLED.value},
            result={"error": "cancelled before it started", "error_type": CallCancelledError.code},
        )
        if not ok and current == CallStatus.RUNNING.value:
            self.redis.set(self.keys.cancel(call_id), "1", ex=self.settings.result_ttl)
        # The state this cancel made is read as is (a cancel is not waited for); any other
        # is an outcome, fenced (``CallStore.records``).
        return self.store.results([call_id], confirm=not ok)[0]

    def resolve_unknown(
        self,
        call_id: str,
        outcome: Resolution | str,
        *,
        by: str,
        note: str | None = None,
        result: str | None = None,
    ) -> CallResult:
        """Resolve a call of unknown outcome (lost with its worker mid-call) as approver ``by``.

        ``outcome``: ``succeeded`` (it took effect; ``result`` is its output text),
        ``failed`` (it did not; ``note`` is the error the model reads) or ``rerun`` (run it
        again). Authorized, signed and audited like an approval (``toolq.approvals.resolving``).
        """
        return resolve(self.approval_store, call_id, by, outcome, note=note, result=result)

    def undo(
        self,
        call_id: str,
        timeout: float | None = 30,
        *,
        principal: str | None = None,
        admin: bool = False,
        approved_by: str | None = None,
        shown: str | None = None,
    ) -> Event:
        """Run the call's undo handler on a worker of its risk level; the ``call.undone`` event.

        Only a call that succeeded. The undo of a gated tool (``undo_gate``) is a person's
        decision, as its call was: ``approved_by`` names the approver who asks (whose
        approver role of that risk the caller checks, as the API does; never the call's
        submitter), and this process signs the approval with its
        ``TOOLQ_APPROVAL_SIGNING_KEY`` (``toolq.approvals.undoing``) for the undo data
        Redis holds now; a worker with verify keys runs a gated tool's undo handler only
        with it, and only on that data. ``shown``: the ``undo_digest`` of the data the
        approver reviewed (``undo_data``): other data now is refused
        (``DigestMismatchError``), no undo requested. A DANGEROUS tool's undo needs as many
        distinct approvers as its calls (``TOOLQ_DANGEROUS_APPROVALS``): each asks in turn,
        and until the last one has, ``UndoAwaitingApprovalsError`` says who approved so far
        (nothing is requested; the approvals wait on the record, for this undo data only).
        Any other undo is the run owner's (or ``admin``'s: ``NotRunOwnerError``). Raises
        ``UndoError`` when there is nothing to undo, it was undone already, or the handler
        failed or was not run (with its error).
        """
        gate = self.undo_gate(call_id) if approved_by is not None else None
        if gate is None:
            run = self.owners.check_call(call_id, principal, admin=admin, action="undo calls of")
            if run is None:
                raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        envelope = self.store.envelope(call_id)
        # The message is pushed by the script that marks the undo requested, so a request
        # never exists without one (and the sweeper re-sends one that is lost).
        tool = self.registry.get(envelope.name)
        queue, message = self.publisher.undo_message(
            call_id, tool.risk if tool is not None else envelope.risk
        )
        approval = ""
        gated = approved_by is not None and gate is not None
        raw = self.redis.get(self.keys.undo(call_id)) if gated or shown is not None else None
        if raw is not None:  # (none: UNDO_CLAIM answers that there is nothing to undo)
            if gated:
                assert approved_by is not None
                approval = sign_undo(self.approval_store, call_id, approved_by, raw)
            current = undo_digest(raw)
            if shown is not None and current != shown:
                raise DigestMismatchError(
                    f"call {call_id}: its undo data changed since it was shown (digest "
                    f"{current} is current); review it again",
                    call_id=call_id,
                    digest=current,
                )
            if gated:
                approval = self._undo_quorum(envelope, raw, approval)
        after = self.log.last_id(envelope.run_id)
        outcome = self.undos.request(call_id, queue, message, approval)
        if outcome == "missing":
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        if outcome != "ok":
            raise UndoError(f"cannot undo call {call_id}: {REFUSALS[outcome]}", call_id=call_id)
        done = {EventType.UNDONE, EventType.UNDO_FAILED}
        for event in self.log.follow(
            envelope.run_id,
            after,
            stop=lambda e: e.call_id == call_id and e.type in done,
            timeout=timeout,
        ):
            if event.call_id == call_id and event.type is EventType.UNDONE:
                return event
            if event.call_id == call_id and event.type is EventType.UNDO_FAILED:
                raise UndoError(
                    f"undo of call {call_id} failed: {event.data.get('error')}", call_id=call_id
                )
        raise WaitTimeoutError(f"undo of call {call_id} not finished after {timeout}s")

    def _undo_quorum(self, envelope: CallEnvelope, raw: bytes | str, approval: str) -> str:
        """The stored form of the undo's approvals once enough approvers asked.

        One approval, when the tool's undo needs one; else ``approval`` joins the ones
        waiting on the record (for this undo data), and a JSON list of them all is returned
        once they are enough, ``UndoAwaitingApprovalsError`` before.
        """
        authority = self.approval_store.authority
        required = authority.required(envelope.name)
        if required <= 1:
            return approval
        facts_digest = digest_call(envelope.name, envelope.arguments)
        risk = authority.risk(envelope.name)

        def held(votes: list[str]) -> dict[str, str]:
            found = held_approvals(
                envelope,
                risk,
                facts_digest,
                raw,
                votes,
                authority.verifier,
                self.settings.undo_approval_seconds,
            )
            # an approver removed from TOOLQ_APPROVERS since they asked no longer counts
            policy = self.approval_store.policy
            return {
                by: signed
                for by, signed in found.items()
                if policy.refusal(risk, envelope.principal, by) is None
            }

        approvers = self.undos.vote(envelope.call_id, approval, held, required)
        if len(approvers) < required:
            raise UndoAwaitingApprovalsError(
                f"undo of call {envelope.call_id} approved by {', '.join(sorted(approvers))}: "
                f"{len(approvers)} of the {required} distinct approvers it needs; the undo "
                "is requested when the others have asked for it too",
                call_id=envelope.call_id,
                approvers=sorted(approvers),
                required=required,
            )
        return dumps(list(approvers.values()))

    def undo_data(
        self,
        call_id: str,
        *,
        principal: str | None = None,
        admin: bool = False,
        approved_by: str | None = None,
    ) -> UndoData:
        """What undoing the call would pass to its undo handler, and that data's digest.

        What an approver reviews before a gated undo (``undo(..., shown=digest)``).
        Asked as ``undo`` is: by ``approved_by`` for a gated tool (one who may decide the
        call, as ``undo`` checks: ``NotAuthorizedError``; the caller checks their approver
        role), else by the run's owner (or ``admin``: ``NotRunOwnerError``). Raises
        ``UndoError`` when no undo data is kept.
        """
        gate = self.undo_gate(call_id) if approved_by is not None else None
        if gate is not None and approved_by is not None:
            check_reader(self.approval_store, call_id, approved_by)
        elif (
            self.owners.check_call(call_id, principal, admin=admin, action="undo calls of") is None
        ):
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        envelope = self.store.envelope(call_id)
        raw = self.redis.get(self.keys.undo(call_id))
        if raw is None:
            raise UndoError(f"cannot undo call {call_id}: it has nothing to undo", call_id=call_id)
        data, text = undo_text(raw, self.settings.max_json_depth)
        return UndoData(
            call_id=call_id,
            tool=envelope.name,
            gated=self.undo_gate(call_id),
            undo_data=data,
            undo_text=text,
            undo_digest=undo_digest(raw),
        )

    def undo_gate(self, call_id: str) -> RiskLevel | None:
        """The risk whose approver role undoing this call needs; ``None`` if it is not gated.

        A call is gated when its tool is DANGEROUS or would be parked by the default policy
        (its ``requires_approval`` says so, or its predicate fails on the arguments).
        """
        envelope = self.store.envelope(call_id)
        # The registry's risk, never the record's (a Redis writer could lower it).
        risk = decided_risk(self.registry, envelope.name)
        tool = self.registry.get(envelope.name)
        if risk is RiskLevel.DANGEROUS or tool is None:
            return risk
        try:  # on the plaintext, as the dispatcher's and the worker's gate see it
            plain = open_arguments(self.approval_store.box, tool, call_id, envelope.arguments)
            route = self.policy.route(tool, plain, RunRules())
        except (ApprovalPredicateError, SecretsError):  # fail closed
            route = "park"
        return risk if route == "park" else None

    def close(self) -> None:
        """Release connections."""
        self.backend.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
