"""``Dispatcher``: a model's response in, one stored call per tool call, queued or parked.

A queued call's Celery message is pushed by the same script that stores the call, so one
round trip creates and enqueues a whole batch. Queued calls of one risk and time limit share
messages of up to ``calls_per_message`` calls, each group created by one script with its
message. Dispatches from other threads of the process that arrive while one is being
created go together in the next round trip, their calls sharing messages too
(``toolq.dispatch.commit``).

Bad calls (unknown tool, bad JSON, invalid arguments) become failed calls and gated ones
denied calls, each with an error the model can read; they never cost the batch its other
calls. Every call is claimed under an idempotency key, so a retried dispatch returns the
calls of the first one and runs nothing twice; a key reused for another tool or other
arguments is refused (``toolq.dispatch.conflicts``).

A run belongs to the principal whose dispatch created it: a dispatch by anyone else (but an
admin) is refused with ``NotRunOwnerError`` and writes nothing, and the run's sticky rules
("always approve/deny this tool") apply only to calls its owner submits. A run also belongs
to one tenant: calls of another tenant are refused even for an admin.

A call of a tool with a ``cost`` whose tenant has a budget is charged when it is created, by
the same script (``toolq.dispatch.budgets``); one over the budget is created ``denied``
with ``budget_exceeded``, and a cost function that fails fails its own call only.

Secret argument values are stored encrypted (``SecretBox``); a call that will not run
(failed, denied) is stored with its secrets masked instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolq.approvals.policy import ApprovalMode, RunRules, rule_age, rule_key
from toolq.dispatch.archived import archived_claims, merge
from toolq.dispatch.commit import Company, CreateCommit
from toolq.dispatch.conflicts import conflict_error, fingerprint, refused_call
from toolq.dispatch.limits import check_payload
from toolq.dispatch.providers import parse_tool_calls
from toolq.dispatch.stages import (
    CallPlan,
    Charge,
    DispatchPlan,
    Gate,
    Place,
    Price,
    Schedule,
    Seal,
    Stage,
    Validate,
    run_stages,
)
from toolq.dispatch.submission import Submission
from toolq.errors import (
    CallIdConflictError,
    InvalidTenantError,
    NotRunOwnerError,
    PayloadError,
)
from toolq.execution.executor import runs_async
from toolq.models import (
    CallEnvelope,
    CallStatus,
    ProviderFormat,
    RpcId,
    ToolCall,
    new_id,
)
from toolq.quotas import tenant_config, valid_tenant
from toolq.results.admission import Admission
from toolq.results.owners import RunOwner, RunOwners, check_new_run_id
from toolq.results.scripts import CreateOutcome
from toolq.results.store import CallStore, MessageGroup, NewCall
from toolq.secretbox import SecretBox
from toolq.telemetry import DispatchSpan, dispatch_span

if TYPE_CHECKING:
    from toolq.approvals.policy import ApprovalPolicy
    from toolq.broker import Publisher
    from toolq.registry.registry import ToolRegistry
    from toolq.results.waits import Pace
    from toolq.settings import Settings


@dataclass(frozen=True)
class CallRef:
    """A dispatched call as the caller sees it right after ``dispatch``."""

    call_id: str
    tool_call_id: str
    name: str
    status: CallStatus
    duplicate: bool = False
    format: ProviderFormat | None = None
    rpc_id: RpcId | None = None


@dataclass(frozen=True)
class Dispatched:
    """What ``Dispatcher.dispatch`` returns: the run, its calls in order, and their format."""

    run_id: str
    calls: list[CallRef]
    format: ProviderFormat | None
    first_event: str | None = None
    """Stream id of the first call's creation, when every call is new: a waiter can read
    the run's stream from there without looking up the calls' states."""
    notify: str | None = None
    """The inbox stream the new calls' final events are copied to (``Keys.wait_inbox``)."""


class Dispatcher:
    """Parses, validates, gates and stores calls, then publishes the runnable ones.

    ``owners`` is the process's ``RunOwners`` (its ``Backend``'s); without it the
    dispatcher makes one over ``store``'s Redis client.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        store: CallStore,
        publisher: Publisher,
        settings: Settings,
        policy: ApprovalPolicy,
        *,
        owners: RunOwners | None = None,
        pace: Pace | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.publisher = publisher
        self.settings = settings
        self.policy = policy
        self.owners = owners or RunOwners(store.redis, store.keys, settings)
        self.box = SecretBox.from_settings(settings)
        self.admission = Admission(store)
        self.stages: tuple[Stage, ...] = (
            Validate(registry),
            Price(),
            Gate(policy),
            Seal(self.box),
            Place(settings, policy),
            Schedule(self.admission),
            Charge(),
        )
        """What each call goes through, in order (``toolq.dispatch.stages``)."""
        self.creates = CreateCommit(
            store,
            self._messages,
            self.admission.invocation,
            company=Company(pace, settings.dispatch_linger),
            full=settings.calls_per_message,
        )
        """Creates this dispatch's calls with other threads' (``toolq.dispatch.commit``)."""

    def dispatch(self, payload: Any, submission: Submission) -> Dispatched:
        """Store and route every tool call in ``payload``, as ``submission`` says.

        ``submission.notify``: an inbox stream (``Keys.wait_inbox``) the records of the
        calls that will turn final later name, for their final events to be copied to.

        Raises only for unreadable payloads, an invalid tenant name (``InvalidTenantError``),
        for a run owned by another principal (``NotRunOwnerError``; ``admin`` may add
        calls to any run of the same tenant) and when every call reuses a call id (or
        idempotency key) of another call (``CallIdConflictError``; nothing is written). The
        tenant's share and limits (``toolq.quotas``) decide when its queued calls reach a
        worker.
        """
        tenant = submission.tenant
        try:
            valid_tenant(tenant)
        except (ValueError, TypeError) as exc:
            raise InvalidTenantError(str(exc), tenant=str(tenant)) from None
        with dispatch_span(submission.principal) as span:
            dispatched = self._dispatch(payload, submission, span)
            span.dispatched(dispatched.run_id, dispatched.calls)
            return dispatched

    def _dispatch(self, payload: Any, submission: Submission, span: DispatchSpan) -> Dispatched:
        run_id, principal, tenant = submission.run_id, submission.principal, submission.tenant
        notify = submission.notify
        payload = check_payload(payload, self.settings)
        calls = parse_tool_calls(payload, submission.format)
        if len(calls) > self.settings.max_calls_per_dispatch:
            raise PayloadError(
                f"{len(calls)} tool calls in one dispatch; the limit is "
                f"{self.settings.max_calls_per_dispatch}"
            )
        run = run_id or new_id()
        # A run this dispatch creates has no rules yet: no need to look them up.
        run_rules, owner = self._rules_for(run, principal, tenant) if run_id else (RunRules(), None)
        if run_id and owner is None:
            check_new_run_id(run_id)  # a run this dispatch creates (one that exists keeps its id)
        budget = tenant_config(self.settings.tenants, tenant).budget
        plan = DispatchPlan(submission, run, run_rules, budget)
        new_calls = []
        for position, call in enumerate(calls):
            new_calls.append(self._plan_call(call, position, plan))
            if span.traceparent:
                new_calls[-1].envelope.traceparent = span.traceparent
                new_calls[-1].envelope.tracestate = span.tracestate
        # Calls whose keys left Redis for the history store are answered from it; to a
        # submitter the run's owner does not admit, CREATE answers (refuses) as when hot.
        admitted = owner is None or owner.admits_submitter(principal, tenant, submission.admin)
        # A run the history store was just found to hold no call of has no claims there.
        ask_history = run_id and admitted and not self.owners.unarchived(run)
        archived = archived_claims(self.store, new_calls) if ask_history else {}
        fresh, created = self.creates.create(
            [c for i, c in enumerate(new_calls) if i not in archived]
        )
        places, replies = merge(archived, created, len(new_calls))
        for i, made in zip(places, fresh, strict=True):
            new_calls[i] = made
        backlogged = {
            new.envelope.risk
            for new, (outcome, _) in zip(new_calls, replies, strict=True)
            if outcome == "new" and new.schedule and new.status is CallStatus.QUEUED
        }
        if backlogged:
            self.admission.admit_soon(backlogged)
        refused = [value for outcome, value in replies if outcome == NotRunOwnerError.code]
        if refused:
            self.owners.refuse(run, principal)
            whose = "principal"
            if RunOwner.decode(refused[0]).tenant_name != tenant:
                whose = "tenant"
            raise NotRunOwnerError(
                f"{principal!r} may not dispatch into run {run!r}: it belongs to another {whose}",
                run_id=run,
                by=principal,
            )
        refused_any = self._refuse_conflicts(new_calls, replies)
        refs: list[CallRef] = []
        to_preview: list[NewCall] = []
        duplicate_ids: list[int] = []
        for new, (outcome, value) in zip(new_calls, replies, strict=True):
            env = new.envelope
            if outcome == "dup":
                duplicate_ids.append(len(refs))
                refs.append(
                    CallRef(
                        value, env.tool_call_id, env.name, CallStatus.QUEUED, True, None, env.rpc_id
                    )
                )
                continue
            refs.append(
                CallRef(
                    env.call_id,
                    env.tool_call_id,
                    env.name,
                    CallStatus.DENIED if outcome == _OVER_BUDGET else new.status,
                    False,
                    env.format,
                    env.rpc_id,
                )
            )
            if outcome == _OVER_BUDGET:
                continue
            if new.parking is not None and new.parking.preview:
                to_preview.append(new)
        if duplicate_ids:
            statuses = self.store.statuses([refs[i].call_id for i in duplicate_ids], confirm=False)
            for i, status in zip(duplicate_ids, statuses, strict=True):
                ref = refs[i]
                refs[i] = CallRef(
                    ref.call_id,
                    ref.tool_call_id,
                    ref.name,
                    status or ref.status,
                    True,
                    rpc_id=ref.rpc_id,
                )
        for new in to_preview:
            self.publisher.send_preview(new.envelope.call_id, new.envelope.risk)
        formats = {c.format for c in calls}
        # A refused call is created after the others: its event is not the first one.
        first = None if duplicate_ids or refused_any or not replies else replies[0][1]
        return Dispatched(run, refs, formats.pop() if len(formats) == 1 else None, first, notify)

    def _plan_call(self, call: ToolCall, position: int, dispatch: DispatchPlan) -> NewCall:
        """The call ``call`` becomes after the stages, claimed under its idempotency key."""
        sub = dispatch.submission
        envelope = CallEnvelope(
            call_id=new_id(),
            run_id=dispatch.run_id,
            tool_call_id=call.id,
            name=call.name,
            arguments=call.arguments,
            format=call.format,
            behavior=sub.behavior,
            principal=sub.principal,
            tenant=sub.tenant,
            idempotency_key=_idempotency_key(call, position, sub.idempotency_key),
            position=position,
            rpc_id=call.rpc_id,
        )
        tool = self.registry.get(call.name)
        if tool is not None:
            envelope.risk = tool.risk
        key = envelope.idempotency_key
        assert key is not None
        named = fingerprint(self.box, tool, call.name, call.arguments)
        return run_stages(self.stages, CallPlan(call, envelope, key, tool, named), dispatch)

    def _refuse_conflicts(self, calls: list[NewCall], replies: list[tuple[str, str]]) -> bool:
        """Refuse the calls whose ids name other calls: all of them, or each as a failed call.

        Replaces, in place, each conflicting call and its reply by the failed call it
        becomes (``toolq.dispatch.conflicts``); True when there was one.
        """
        code = CallIdConflictError.code
        conflicts = [i for i, (outcome, _) in enumerate(replies) if outcome == code]
        if not conflicts:
            return False
        if len(conflicts) == len(replies):
            raise conflict_error(calls[conflicts[0]], replies[conflicts[0]][1])
        refused = [
            refused_call(calls[i], replies[i][1], self.registry.get(calls[i].envelope.name))
            for i in conflicts
        ]
        for i, call, reply in zip(conflicts, refused, self.store.create_many(refused), strict=True):
            calls[i], replies[i] = call, reply
        return True

    def _rules_for(
        self, run_id: str, principal: str | None, tenant: str
    ) -> tuple[RunRules, RunOwner | None]:
        """The run's rules as they apply to ``principal``'s calls, and its owner (one trip)."""
        pipe = self.store.redis.pipeline(transaction=False)
        pipe.get(self.store.keys.run_settings(run_id))
        pipe.get(self.store.keys.run_owner(run_id))
        raw_rules, raw_owner = pipe.execute()
        rules = RunRules.model_validate_json(raw_rules) if raw_rules else RunRules()
        # A run whose keys left Redis keeps its owner: put back from the history store, the
        # scripts creating the calls refuse anyone else, as they do while the run is hot.
        owner = RunOwner.decode(raw_owner) if raw_owner else self.owners.restore(run_id)
        if owner is not None and not owner.admits(principal, tenant):
            # An approver's "always" and mode auto were granted for the owner's calls (signed
            # for its submitter and tenant: workers refuse them for anyone else's), not for
            # an admin's: its calls are gated as in a run without those rules.
            loosened: dict[str, Any] = {"always_approve": [], "always_deny": []}
            if rules.mode is ApprovalMode.AUTO:
                loosened["mode"] = None
            rules = rules.model_copy(update=loosened)
        young = self.settings.rule_seconds - min(RULE_MARGIN, self.settings.rule_seconds / 10)
        return _granted_to(rules, principal, tenant, young), owner

    def _messages(self, calls: list[NewCall]) -> tuple[list[NewCall], list[MessageGroup]]:
        """The queued calls' messages: one per group of calls of one risk and time limit.

        Groups are formed among ``calls_per_message`` consecutive calls; a call left alone
        gets its own message (``toolq.execute``). The script that creates a group creates
        the calls between its members too, so calls are created in dispatch order.
        Scheduled calls (``Admission``) are grouped by backlog too, at most
        ``admission_batch`` to a message (a message is what admission lets through at a
        time); one with limits gets a message of its own (its limits are checked alone).
        """
        size = self.settings.calls_per_message
        calls = list(calls)
        groups: list[MessageGroup] = []
        for window in range(0, len(calls), size):
            by_route: dict[tuple[str, float | None, tuple[str, str] | None], list[int]] = {}
            for i in range(window, min(window + size, len(calls))):
                # A charged call its CREATE turns denied (over budget) stays in its group's
                # message, as a duplicate does: CREATE_GROUP notes only the calls created
                # queued, and a worker's START skips the others.
                call = calls[i]
                if call.status is not CallStatus.QUEUED:
                    continue
                if call.schedule and call.schedule.limited:
                    self._flush(calls, groups, [i])
                    continue
                route = (
                    call.envelope.risk.value,
                    call.timeout,
                    call.schedule.slots if call.schedule else None,
                )
                members = by_route.setdefault(route, [])
                members.append(i)
                if call.schedule and len(members) >= self.settings.admission_batch:
                    self._flush(calls, groups, by_route.pop(route))
            for members in by_route.values():
                self._flush(calls, groups, members)
        return calls, groups

    def _flush(self, calls: list[NewCall], groups: list[MessageGroup], members: list[int]) -> None:
        """The message of ``members`` (positions in ``calls``): a lone call's, or a group's."""
        first = calls[members[0]]
        risk, timeout = first.envelope.risk, first.timeout
        if len(members) == 1:
            env = first.envelope
            message = self.publisher.message(env.call_id, risk, timeout, env.run_id)
            calls[members[0]] = dataclasses.replace(first, message=message)
            return
        carried = [
            (
                calls[i].envelope.call_id,
                calls[i].envelope.run_id,
                self._kind(calls[i].envelope.name),
            )
            for i in members
        ]
        queue, batch = self.publisher.batch_message(carried, risk, timeout)
        schedule = first.schedule.slots if first.schedule else None
        groups.append(MessageGroup(tuple(members), queue, batch, schedule))

    def _kind(self, name: str) -> str:
        """``"async"`` for a call of an ``async def`` tool, else ``"sync"`` (the worker's slots)."""
        tool = self.registry.get(name)
        return "async" if tool is not None and runs_async(tool) else "sync"


RULE_MARGIN = 300.0
"""Seconds before a signed rule's end (``Settings.rule_seconds``) the dispatcher stops
applying it: a call it lets through is started within its rule's life."""


def _granted_to(rules: RunRules, principal: str | None, tenant: str, young: float) -> RunRules:
    """``rules`` without the signed loosening rules that workers would refuse for the call.

    A signed rule (sticky always-approve, mode ``auto``) names the submitter and tenant it
    was granted to; every verifying worker refuses it for a call of anyone else, or one
    signed before rules named them, or past its age (one signed more than ``young``
    seconds ago: ``Settings.rule_seconds`` less ``RULE_MARGIN``). Such a rule is left out
    here, so the call parks for a person instead of being queued to fail
    (``approval_unverified``, which no approver can approve away): e.g. a run whose owner
    key expired and was claimed again. The signature
    is only read here, not verified: routing, not authority (the workers verify). A rule
    without a signature (a deployment that does not sign) is kept.
    """

    def granted(rule: str, tool: str) -> bool:
        signed = rules.signatures.get(rule_key(rule, tool))
        if not signed:
            return True
        payload = signed.get("payload")
        return (
            isinstance(payload, dict)
            and payload.get("submitter") == principal
            and payload.get("tenant") == tenant
            and rule_age(payload) <= young
        )

    kept = [name for name in rules.always_approve if granted("always_approve", name)]
    auto = rules.mode is ApprovalMode.AUTO and not granted("mode_auto", "*")
    if len(kept) == len(rules.always_approve) and not auto:
        return rules
    update: dict[str, Any] = {"always_approve": kept}
    if auto:
        update["mode"] = None
    return rules.model_copy(update=update)


_OVER_BUDGET: CreateOutcome = "over_budget"
"""CREATE's reply for a call it created denied, over its tenant's budget."""


def _idempotency_key(call: ToolCall, position: int, client_key: str | None) -> str:
    """The key a call is claimed under: the client's per position, else the call's id."""
    if client_key:
        return f"client:{client_key}:{position}"
    if isinstance(call.rpc_id, int):
        # The JSON-RPC ids 7 and "7" are two requests; both have the call id "7".
        return f"rpc-int:{call.rpc_id}"
    return f"call:{call.id}"
