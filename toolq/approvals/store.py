"""``ApprovalStore``: parked calls in Redis, decided by one compare-and-set each.

Only a call still ``awaiting_approval`` and before its deadline can be decided; of any
number of racing approvers exactly one wins and enqueues. Every decision, refusal and
expiry is appended to the audit stream. Who may decide, and how many must, comes from the
registry, never from the record (``toolq.approvals.authority``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolq.approvals.authority import Authority
from toolq.approvals.listing import approvals_page
from toolq.approvals.models import ApprovalRequest, AuditEntry
from toolq.approvals.policy import (
    ApprovalMode,
    ApprovalPolicy,
    RunRules,
    digest_call,
    rule_key,
)
from toolq.errors import (
    ApprovalDeniedError,
    ApprovalExpiredError,
    CallNotFoundError,
    CostError,
    DigestMismatchError,
    InvalidArgumentsError,
    NotAuthorizedError,
    NotAwaitingApprovalError,
    ToolqError,
)
from toolq.models import (
    REFUSED_SAME_APPROVER,
    REFUSED_STICKY_UNDER_QUORUM,
    AuditOutcome,
    CallEnvelope,
    CallResult,
    CallStatus,
    RiskLevel,
)
from toolq.quotas import tenant_config
from toolq.registry.secrets import SecretPaths, mask_arguments
from toolq.results import scripts
from toolq.results.admission import Admission
from toolq.results.audit_log import AuditLog
from toolq.results.connection import as_text
from toolq.results.owners import RunOwner, RunOwners
from toolq.results.paging import DEFAULT_LIMIT, MAX_LIMIT, Page
from toolq.results.store import CallStore, dumps
from toolq.secretbox import SecretBox, merge_edit, open_arguments
from toolq.signing import signer_for

if TYPE_CHECKING:
    from toolq.broker import Publisher
    from toolq.registry.registry import ToolRegistry
    from toolq.registry.tool import Tool

EXPIRED_RESULT = {
    "error": "approval expired: nobody approved this call before its deadline, so it did not run",
    "error_type": ApprovalExpiredError.code,
}


log = logging.getLogger("toolq.approvals")

DECIDE_ATTEMPTS = 20
"""Re-reads of a call whose approvals moved under a decision (quorum races) before giving up."""


def audit_fields(
    call_id: str, run_id: str, tool: str, by: str, outcome: str, digest: str, ts: str
) -> dict[str, str]:
    """The fields of an audit entry that its signature covers, as stored."""
    return {
        "call_id": call_id,
        "run_id": run_id,
        "tool": tool,
        "by": by,
        "outcome": outcome,
        "digest": digest,
        "ts": ts,
    }


def approvals_of(record: Mapping[str, str]) -> list[dict[str, Any]]:
    """A record's approvals so far: ``{"by", "digest", "ts", "sig"}`` each."""
    raw = record.get("approvers")
    if not raw:
        return []
    try:
        items = json.loads(raw)
    except ValueError:
        return []
    out = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):  # written before approvals carried their digest
            item = {"by": item, "digest": record.get("digest", "")}
        if isinstance(item, dict):
            out.append(item)
    return out


def _distinct(approvals: list[dict[str, Any]], digest: str) -> list[dict[str, Any]]:
    """The first approval of each approver of ``digest``: a copied approval counts once."""
    kept: list[dict[str, Any]] = []
    for approval in approvals:
        if approval.get("digest") == digest and all(k["by"] != approval.get("by") for k in kept):
            kept.append(approval)
    return kept


def changed_since_shown(call_id: str, current: str) -> DigestMismatchError:
    """The refusal of a decision about a call whose tool or arguments changed since shown."""
    return DigestMismatchError(
        f"call {call_id}: the call (its tool or arguments) changed since it was shown "
        f"(digest {current} is current); review the call again",
        call_id=call_id,
        digest=current,
    )


class Parked:
    """A call record as a deciding process reads it, with what it computes itself.

    The stored ``digest`` field is never trusted: what is approved is the digest of the
    tool's name and the stored arguments as they are (secret values included as stored).
    Nor are the stored ``risk`` and approvals: ``facts`` carry the registry's risk, and
    ``approvals`` are the ones whose signatures hold for those facts.
    """

    def __init__(self, record: dict[str, str], authority: Authority) -> None:
        self.record = record
        self.envelope = CallEnvelope.model_validate_json(record["envelope"])
        self.digest = digest_call(self.envelope.name, self.envelope.arguments)
        self.facts = authority.facts(self.envelope, self.digest)
        self.risk = RiskLevel(self.facts["risk"])
        self.approvals = authority.verified(approvals_of(record), self.facts)


@dataclass(frozen=True)
class Tally:
    """A decision's count of approvals, before DECIDE commits it.

    ``prior``: the approvals it keeps; ``names``: every approver, the decider last;
    ``final``: it decides the call; ``digest``: of the arguments it is for.
    """

    prior: list[dict[str, Any]]
    names: list[str]
    final: bool
    digest: str

    def outcome(self, decision: scripts.DecisionKind) -> AuditOutcome:
        """The audit outcome of ``decision`` with this count."""
        if decision == "deny":
            return AuditOutcome.DENIED
        return AuditOutcome.APPROVED if self.final else AuditOutcome.APPROVED_PARTIAL


def _audited(
    parked: Parked, by: str, outcome: str, tally: Tally | None, ts: str
) -> tuple[str, str, str, str, str, str, str]:
    """``_audit_sig``'s arguments for ``by``'s decision; without a tally, for the shown digest."""
    env = parked.envelope
    digest = tally.digest if tally is not None else parked.digest
    return env.call_id, env.run_id, env.name, by, outcome, digest, ts


def to_request(
    record: dict[str, str],
    paths: SecretPaths | None = None,
    *,
    risk: RiskLevel | None = None,
    approvals: list[dict[str, Any]] | None = None,
) -> ApprovalRequest:
    """What approvers see of a call record, in any state: every secret masked.

    ``paths`` are the tool's secret locations; without them, sealed values are still masked.
    ``risk`` (the tool's, default: the record's) and ``approvals`` (the ones that count,
    default: the record's) are what a deciding process found.
    """
    envelope = CallEnvelope.model_validate_json(record["envelope"])
    original = envelope.original_arguments
    counted = approvals_of(record) if approvals is None else approvals
    return ApprovalRequest(
        call_id=envelope.call_id,
        run_id=envelope.run_id,
        tool_call_id=envelope.tool_call_id,
        name=envelope.name,
        risk=envelope.risk if risk is None else risk,
        status=CallStatus(record["status"]),
        arguments=mask_arguments(envelope.arguments, paths),
        original_arguments=mask_arguments(original, paths) if original is not None else None,
        digest=digest_call(envelope.name, envelope.arguments),
        submitter=envelope.principal,
        tenant=envelope.tenant,
        created_at=float(record.get("created_at") or envelope.created_at),
        deadline=float(record["deadline"]) if record.get("deadline") else None,
        approval_metadata=json.loads(record["approval_metadata"])
        if record.get("approval_metadata")
        else None,
        preview=json.loads(record["preview"]) if record.get("preview") else None,
        preview_error=record.get("preview_error") or None,
        diff=json.loads(record["diff"]) if record.get("diff") else None,
        approvals=[str(a.get("by")) for a in counted],
        decided_by=record.get("decided_by") or None,
    )


class ApprovalStore:
    """Lists, approves, denies and expires calls that are ``awaiting_approval``.

    ``owners`` is the process's ``RunOwners`` (its ``Backend``'s); without it the store
    makes one over ``store``'s Redis client.
    """

    def __init__(
        self,
        store: CallStore,
        publisher: Publisher,
        registry: ToolRegistry,
        policy: ApprovalPolicy,
        *,
        owners: RunOwners | None = None,
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.registry = registry
        self.policy = policy
        self.settings = store.settings
        self.keys = store.keys
        self.redis = store.redis
        self.box = SecretBox.from_settings(self.settings)
        self.scripts = store.scripts
        self.signer = signer_for(self.settings)
        self.authority = Authority(registry, self.settings, self.signer)
        self._warned = False
        self.owners = owners or RunOwners(self.redis, self.keys, self.settings)
        self.audit_log = AuditLog(self.redis, self.keys, self.settings.audit_maxlen, self.scripts)

    # -- reading -----------------------------------------------------------------------------

    def pending(
        self,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
    ) -> list[ApprovalRequest]:
        """Calls awaiting a decision, soonest deadline first, optionally filtered."""
        raw: Any = self.redis.zrange(self.keys.pending_approvals, 0, -1)
        ids = [as_text(c) for c in raw]
        level = RiskLevel.parse(risk) if risk is not None else None
        out = []
        for record in self.store.records(ids, confirm=False):
            if record is None or record["status"] != CallStatus.AWAITING_APPROVAL.value:
                continue
            if run_id is not None and record["run_id"] != run_id:
                continue
            if tool is not None and record["name"] != tool:
                continue
            request = self._request(record)
            if level is not None and request.risk is not level:
                continue
            out.append(request)
        return out

    def page(
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
        """One page of calls awaiting a decision, oldest parked first (``toolq.approvals.listing``).

        ``since``/``until``: when they were parked (epoch seconds); ``cursor``: the previous
        page's ``next_cursor``; ``tenant``: that tenant's calls only.
        """
        return approvals_page(
            self.store,
            self._request,
            limit=limit,
            cursor=cursor,
            since=since,
            until=until,
            run_id=run_id,
            risk=risk,
            tool=tool,
            tenant=tenant,
        )

    def get(self, call_id: str) -> ApprovalRequest:
        """A call as approvers see it (any state).

        Read unfenced: ``TOOLQ_MIN_REPLICAS_ACK`` fences the reads of outcomes, not this
        view of the request.
        """
        [record] = self.store.records([call_id], confirm=False)
        if record is None:
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        return self._request(record)

    def _request(self, record: dict[str, str]) -> ApprovalRequest:
        """The call as approvers see it: the tool's risk and only the approvals that count.

        A tool this process does not know shows the record's risk, for information: it is
        decided as DANGEROUS all the same (``Authority.risk``).
        """
        tool = self.registry.get(record["name"])
        approvals = Parked(record, self.authority).approvals
        if tool is None:
            return to_request(record, approvals=approvals)
        return to_request(record, tool.secret_paths, risk=tool.risk, approvals=approvals)

    def audit(self, count: int = 100, after: str | None = None) -> list[AuditEntry]:
        """Audit entries, oldest first, after the stream id ``after``."""
        entries: Any = self.redis.xrange(
            self.keys.audit_stream, min=f"({after}" if after else "-", count=count
        )
        out = []
        for entry_id, fields in entries:
            f = {as_text(k): as_text(v) for k, v in fields.items()}
            out.append(AuditEntry(id=as_text(entry_id), **{**f, "ts": float(f["ts"])}))
        return out

    # -- deciding ----------------------------------------------------------------------------

    def approve(
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

        ``digest`` names the call (tool and arguments) the approver saw; if it changed, the
        decision is refused. Without it, whatever is parked when this runs is approved: that
        is for trusted in-process code of a deciding process (it holds the signing key), which
        decides what it read itself. Every path that decides for a person passes the digest
        that person was shown (the HTTP API and the CLI require it).
        ``always`` also approves this tool for the rest of the run.
        With a quorum (``dangerous_approvals`` > 1) an edit replaces the arguments and
        resets the other approvals: everyone must approve the edited version.
        """
        for _ in range(DECIDE_ATTEMPTS):
            parked = self._read(call_id)
            request = self._authorize(parked, by)
            if always and self._required(parked) > 1:
                self._audit(request, by, AuditOutcome.refused(REFUSED_STICKY_UNDER_QUORUM))
                raise NotAuthorizedError(
                    f"call {call_id} needs {self._required(parked)} approvers: one approver's "
                    "sticky approval cannot stand in for them (approve without always)",
                    call_id=call_id,
                    by=by,
                )
            shown = parked.digest
            if digest is not None and digest != shown:
                self._audit(request, by, AuditOutcome.refused(DigestMismatchError.code))
                raise changed_since_shown(call_id, shown)
            data: dict[str, Any] = {"by": by, "decision": AuditOutcome.APPROVED.value}
            if note:
                data["note"] = note
            new_envelope, new_digest = "", ""
            if arguments is not None:
                tool = self.registry.require(parked.envelope.name)
                stored = merge_edit(self.box, tool, call_id, arguments, parked.envelope.arguments)
                try:
                    # decrypted in memory only, to validate (and price) what will run
                    plain = open_arguments(self.box, tool, call_id, stored)
                    tool.validate(plain)
                    self._check_cost(parked, tool, plain)
                except (InvalidArgumentsError, CostError) as exc:
                    self._audit(request, by, AuditOutcome.refused(exc.code))
                    raise
                first = parked.envelope.original_arguments
                edited = parked.envelope.model_copy(
                    update={
                        "arguments": stored,
                        "original_arguments": parked.envelope.arguments if first is None else first,
                    }
                )
                new_envelope = edited.model_dump_json()
                # the digest of what is stored (secrets sealed), as workers compute it
                new_digest = digest_call(parked.envelope.name, stored)
                data["edited_arguments"] = tool.redact(stored)
            outcome = self._run_decide(
                parked, "approve", by, data, None, new_envelope, new_digest or None
            )
            if outcome == "retry":
                continue
            if always:
                self._set_rule(parked, "always_approve", by)
            return self.store.result(call_id)
        raise NotAwaitingApprovalError(
            f"call {call_id} kept changing while it was being approved; try again",
            call_id=call_id,
            status=CallStatus.AWAITING_APPROVAL.value,
        )

    def deny(self, call_id: str, by: str, reason: str = "", *, always: bool = False) -> CallResult:
        """Deny a parked call; the model reads ``reason``; ``always`` denies it for the run."""
        parked = self._read(call_id)
        request = self._authorize(parked, by)
        message = f"denied by {by}: {reason}" if reason else f"denied by {by}"
        result: dict[str, Any] = {"error": message, "error_type": ApprovalDeniedError.code}
        data: dict[str, Any] = {
            "status": CallStatus.DENIED.value,
            "by": by,
            "decision": AuditOutcome.DENIED.value,
            "reason": reason,
            "error": message,
        }
        self._run_decide(parked, "deny", by, data, result, "", None)
        if always:
            self.policy.update_rules(
                request.run_id, lambda rules: rules.always_deny.append(request.name)
            )
        return self.store.result(call_id)

    def decide_run(
        self,
        run_id: str,
        by: str,
        *,
        approve: Sequence[str] = (),
        deny: Mapping[str, str] | None = None,
    ) -> dict[str, CallResult | ToolqError]:
        """Decide several parallel calls of a run; each gets its result or its error."""
        outcomes: dict[str, CallResult | ToolqError] = {}
        for call_id in approve:
            outcomes[call_id] = self._attempt(run_id, call_id, lambda c: self.approve(c, by))
        for call_id, reason in (deny or {}).items():
            outcomes[call_id] = self._attempt(
                run_id, call_id, lambda c, r=reason: self.deny(c, by, r)
            )
        return outcomes

    def approve_run(
        self,
        run_id: str,
        by: str,
        shown: Mapping[str, str],
        *,
        may: Callable[[ApprovalRequest], ToolqError | None] | None = None,
    ) -> dict[str, CallResult | ToolqError]:
        """Approve the calls of a run ``by`` reviewed, each as ``approve`` would.

        ``shown`` maps each call the approver was shown to its digest (of its tool and
        arguments) as shown: only those are approved, each bound to its digest (a call whose
        tool or arguments changed since is refused, ``digest_mismatch``), and a call parked
        after the listing stays parked. ``may`` (the caller's own check, e.g. its approver
        roles) returns the error that keeps ``by`` from a call, which is then left parked;
        the store's own
        refusals (self-approval, a second approval by the same approver) are audited and
        returned the same way. Each listed call gets its result (queued, or still parked
        short of a quorum) or its error, oldest parked first; one not parked in the run,
        ``not_awaiting_approval``.
        """
        parked: list[ApprovalRequest] = []
        cursor: str | None = None
        while True:
            page = self.page(run_id=run_id, limit=MAX_LIMIT, cursor=cursor)
            parked.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        outcomes: dict[str, CallResult | ToolqError] = {}
        for request in parked:
            digest = shown.get(request.call_id)
            if digest is None:  # not reviewed (parked after the listing, say): left parked
                continue
            refusal = may(request) if may is not None else None
            if refusal is not None:
                outcomes[request.call_id] = refusal
                continue
            outcomes[request.call_id] = self._attempt(
                run_id, request.call_id, lambda c, d=digest: self.approve(c, by, digest=d)
            )
        parked_ids = {r.call_id for r in parked}
        for call_id in shown:
            if call_id not in parked_ids:
                outcomes[call_id] = NotAwaitingApprovalError(
                    f"call {call_id} is not awaiting a decision in run {run_id}",
                    call_id=call_id,
                )
        return outcomes

    def _attempt(self, run_id: str, call_id: str, decide: Any) -> CallResult | ToolqError:
        try:
            if self.store.run_id(call_id) != run_id:
                raise CallNotFoundError(f"call {call_id} is not part of run {run_id}")
            result: CallResult = decide(call_id)
            return result
        except ToolqError as exc:
            return exc

    def expire_due(self, now: float | None = None, limit: int = 500) -> int:
        """Expire parked calls past their deadline (the sweeper's step); returns how many."""
        moment = time.time() if now is None else now
        due: Any = self.redis.zrangebyscore(
            self.keys.pending_approvals, 0, moment, start=0, num=limit
        )
        expired = 0
        for raw in due:
            call_id = as_text(raw)
            run_id, tenant = self.store.run_and_tenant(call_id)
            if run_id is None:
                self.redis.zrem(self.keys.pending_approvals, call_id)
                self.redis.zrem(self.keys.parked, call_id)
                continue
            outcome = self.scripts.run(
                scripts.EXPIRE(
                    keys=self.keys,
                    call_id=call_id,
                    run_id=run_id,
                    now=repr(moment),
                    maxlen=self.settings.stream_maxlen,
                    ttl=self.settings.result_ttl,
                    result=dumps(EXPIRED_RESULT),
                    audit_maxlen=self.settings.audit_maxlen,
                    tenant=tenant,
                )
            )
            expired += outcome == "expired"
        return expired

    # -- per-run rules ------------------------------------------------------------------------

    def rules(self, run_id: str) -> RunRules:
        """A run's approval rules."""
        return self.policy.run_rules(run_id)

    def set_rules(
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

        A change that loosens the gate needs ``by``, an approver: for mode ``auto`` one who
        may decide DANGEROUS calls; for leaving ``strict`` one for MODERATE; for taking a
        tool off the approval list one for that tool's risk. Mode ``auto`` is signed.
        Only the run's owner (or ``admin``) may change them (``NotRunOwnerError``); on a run
        not created yet, ``principal`` (of ``tenant``, else the default one) becomes its
        owner (an admin claims nothing: its mode ``auto`` there is refused, signed for
        nobody). ``tenant``: the caller's; a run of another tenant is refused.
        """
        self.owners.check(
            run_id,
            principal,
            admin=admin,
            action="change the rules of",
            claim=True,
            tenant=tenant,
        )
        new_mode = ApprovalMode(mode) if mode is not None else None
        current = self.rules(run_id)
        needs: list[tuple[RiskLevel, str]] = []
        if new_mode is ApprovalMode.AUTO and self.settings.dangerous_approvals > 1:
            raise NotAuthorizedError(
                f"mode auto would let DANGEROUS calls of run {run_id} run without the "
                f"{self.settings.dangerous_approvals} approvers they need",
                run_id=run_id,
                by=by,
            )
        if new_mode is ApprovalMode.AUTO:
            # Signed below, whatever the stored mode says: a Redis writer may have set it.
            needs.append((RiskLevel.DANGEROUS, "mode auto"))
        if current.mode is ApprovalMode.STRICT and new_mode not in (None, ApprovalMode.STRICT):
            needs.append((RiskLevel.MODERATE, f"mode {new_mode}"))
        kept = set(current.approve_tools if approve_tools is None else approve_tools)
        for name in set(current.approve_tools) - kept:
            needs.append((self.authority.risk(name), f"no approval for {name}"))
        for risk, what in needs:
            self._authorize_rule(run_id, by, risk, what)
        signed = None
        if new_mode is ApprovalMode.AUTO and by is not None:
            signed = self._sign_rule(run_id, "mode_auto", "*", by)

        def change(rules: RunRules) -> None:
            if new_mode is not None:
                rules.mode = new_mode
                if new_mode is not ApprovalMode.AUTO:
                    rules.signatures.pop(rule_key("mode_auto", "*"), None)
            if signed is not None:
                rules.signatures[rule_key("mode_auto", "*")] = signed
            if approve_tools is not None:
                rules.approve_tools = list(approve_tools)
            if approval_timeout is not None:
                rules.approval_timeout = approval_timeout

        return self.policy.update_rules(run_id, change)

    def export_state(self, run_id: str) -> dict[str, Any]:
        """A run's approval state (mode, lists, sticky decisions) to save."""
        return self.policy.export_state(run_id)

    def restore_state(
        self,
        run_id: str,
        state: dict[str, Any],
        *,
        by: str | None = None,
        principal: str | None = None,
        admin: bool = False,
        tenant: str | None = None,
    ) -> RunRules:
        """Restore a saved approval state onto a run (owner or ``admin`` only, as ``set_rules``).

        Signatures are bound to their run, so a state that loosens the gate (sticky
        approvals, mode ``auto``) is signed again here, by ``by``, who must be an approver
        for each tool's risk (DANGEROUS for mode ``auto``).
        """
        self.owners.check(
            run_id,
            principal,
            admin=admin,
            action="change the rules of",
            claim=True,
            tenant=tenant,
        )
        rules = RunRules.model_validate(state)
        rules.signatures = {}
        quorum = self.settings.dangerous_approvals > 1
        dangerous = [
            n for n in rules.always_approve if self.authority.risk(n) is RiskLevel.DANGEROUS
        ]
        if quorum and (dangerous or rules.mode is ApprovalMode.AUTO):
            raise NotAuthorizedError(
                f"the state lets DANGEROUS calls of run {run_id} run without the "
                f"{self.settings.dangerous_approvals} approvers they need",
                run_id=run_id,
                by=by,
            )
        if rules.mode is ApprovalMode.AUTO:
            self._authorize_rule(run_id, by, RiskLevel.DANGEROUS, "mode auto")
        for name in rules.always_approve:
            self._authorize_rule(run_id, by, self.authority.risk(name), f"always approve {name}")
        if by is not None:
            wanted = [("always_approve", name) for name in rules.always_approve]
            if rules.mode is ApprovalMode.AUTO:
                wanted.append(("mode_auto", "*"))
            for rule, name in wanted:
                signed = self._sign_rule(run_id, rule, name, by)
                if signed is not None:
                    rules.signatures[rule_key(rule, name)] = signed
        return self.policy.set_run_rules(run_id, rules)

    def _authorize_rule(self, run_id: str, by: str | None, risk: RiskLevel, change: str) -> None:
        reason = self.policy.refusal(risk, None, by or "")
        if reason is None:
            return
        ts = repr(time.time())
        outcome = AuditOutcome.refused(f"rule:{reason}")
        fields = audit_fields("", run_id, "", by or "", outcome, "", ts)
        self.audit_log.append({**fields, "sig": self._audit_sig(**fields)})
        raise NotAuthorizedError(
            f"{change} loosens the approval gate of run {run_id}: it needs an approver for "
            f"{risk.value} calls (by=...); {by or 'nobody'!r} is refused: "
            f"{reason.replace('_', ' ')}",
            run_id=run_id,
            by=by,
        )

    def _run_owner(self, run_id: str, by: str) -> RunOwner:
        """The owner a loosening rule of ``run_id`` is signed for: the run's calls' submitter.

        A run nobody owns yet (an admin's rules before its first call) has nobody to sign
        for: a rule signed for no owner would queue the calls of whoever then claims the
        run, and every verifying worker would refuse them. Refused instead.
        """
        owner = self.owners.get(run_id)
        if owner is None:
            raise NotAuthorizedError(
                f"run {run_id} has no owner yet: a rule that loosens its gate is signed for "
                "its owner's calls; set it as the run's owner (principal=...) or after its "
                "first call",
                run_id=run_id,
                by=by,
            )
        return owner

    def _sign_rule(
        self, run_id: str, rule: str, tool: str, by: str, owner: RunOwner | None = None
    ) -> dict[str, Any] | None:
        """A loosening rule signed for the run's own calls: its owner's submitter and tenant.

        ``owner``: the run's, when the caller knows it (default: the run's owner key).
        Workers refuse the rule for a call of another submitter or tenant, as a decision: a
        Redis writer cannot borrow a run's rule for its own calls.
        """
        if self.signer is None:
            return None
        owner = owner or self._run_owner(run_id, by)
        return self.signer.sign(
            "rule",
            run_id=run_id,
            rule=rule,
            tool=tool,
            submitter=owner.principal,
            tenant=owner.tenant_name,
            by=by,
            ts=repr(time.time()),
        )

    def _set_rule(self, parked: Parked, rule: str, by: str) -> None:
        """Add a sticky approval (already authorized by the decision it came with), signed.

        Granted to the run's owner, as every rule of the run (the dispatcher applies them to
        its owner's calls only), whoever submitted the call it came with (an admin's too):
        the owner the call was created under (its record), else the run's.
        """
        envelope = parked.envelope
        run_id, tool = envelope.run_id, envelope.name
        recorded = parked.record.get("owner")
        owner = RunOwner.decode(recorded) if recorded else self.owners.get(run_id)
        if owner is None:  # a record from before calls carried their run's owner
            owner = RunOwner.of(envelope.principal, envelope.tenant)
        signed = self._sign_rule(run_id, rule, tool, by, owner)

        def change(rules: RunRules) -> None:
            rules.always_approve.append(tool)
            if signed is not None:
                rules.signatures[rule_key(rule, tool)] = signed

        self.policy.update_rules(run_id, change)

    # -- calls of unknown outcome ------------------------------------------------------------

    def unknown(self, run_id: str | None = None) -> list[ApprovalRequest]:
        """Calls of unknown outcome (lost with their worker mid-call), longest lost first."""
        raw: Any = self.redis.zrange(self.keys.unknown, 0, -1)
        out = []
        for record in self.store.records([as_text(c) for c in raw], confirm=False):
            if record is None or record["status"] != CallStatus.UNKNOWN.value:
                continue
            if run_id is not None and record["run_id"] != run_id:
                continue
            out.append(self._request(record))
        return out

    # -- internals ---------------------------------------------------------------------------

    def _read(self, call_id: str) -> Parked:
        # unfenced: DECIDE's compare-and-set settles what the call is
        [record] = self.store.records([call_id], confirm=False)
        if record is None:
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        return Parked(record, self.authority)

    def _authorize(self, parked: Parked, by: str) -> ApprovalRequest:
        request = self._request(parked.record)
        reason = self.policy.refusal(parked.risk, request.submitter, by)
        if reason is not None:
            self._audit(request, by, AuditOutcome.refused(reason))
            raise NotAuthorizedError(
                f"{by!r} may not decide call {request.call_id}: {reason.replace('_', ' ')}",
                call_id=request.call_id,
                by=by,
            )
        return request

    def _check_cost(self, parked: Parked, tool: Tool, arguments: dict[str, Any]) -> None:
        """Refuse an edit that makes a call cost more than its tenant was charged for it.

        The budget is charged when the call is accepted (``create.lua``); a costlier edit
        would run past what was reserved, so it is refused (deny, and dispatch anew).
        """
        if tenant_config(self.settings.tenants, parked.envelope.tenant).budget is None:
            return
        charged = float(parked.record.get("charged") or 0)
        cost = tool.cost_of(arguments)
        if cost > charged:
            raise CostError(
                f"call {parked.envelope.call_id}: the edited arguments cost {cost:g} but the "
                f"call was charged {charged:g} when it was accepted; an edit may not raise a "
                "call's cost (deny it and dispatch the call again)"
            )

    def _required(self, parked: Parked) -> int:
        return self.authority.required(parked.envelope.name)

    def _run_decide(
        self,
        parked: Parked,
        decision: scripts.DecisionKind,
        by: str,
        data: dict[str, Any],
        result: dict[str, Any] | None,
        envelope: str,
        new_digest: str | None,
    ) -> str:
        """Sign the outcome, then commit it with one compare-and-set; ``retry`` if it moved.

        ``envelope``: the edited envelope (``""``: unchanged), whose arguments' digest is
        ``new_digest``. Returns ``ok``, ``partial`` (approved, the quorum not reached yet)
        or ``retry``; every other outcome raises.
        """
        tally = self._tally(parked, decision, by, new_digest)
        now = time.time()
        ts = repr(now)
        own, approval = self._sign(parked, decision, by, tally, ts)
        tool = self.registry.get(parked.envelope.name)
        # The queue of the tool's risk (the record's only for a tool this process lacks).
        lane = tool.risk if tool is not None else parked.envelope.risk
        message = None
        if decision == "approve" and tally.final:
            timeout = tool.run_timeout(self.settings.default_timeout) if tool else None
            env = parked.envelope
            message = self.publisher.message(env.call_id, lane, timeout, env.run_id)
        event = {**data, "decided_at": now}
        if decision == "approve":
            waiting = CallStatus.QUEUED if tally.final else CallStatus.AWAITING_APPROVAL
            event.update(status=waiting.value, approvals=len(tally.names))
        committed = scripts.Decision(
            call_id=parked.envelope.call_id,
            kind=decision,
            by=by,
            now=ts,
            envelope_read=parked.record["envelope"] if decision == "approve" else "",
            check_approvals=decision == "approve",
            maxlen=self.settings.stream_maxlen,
            ttl=self.settings.result_ttl,
            data=dumps(event),
            result=dumps(result) if result is not None else "",
            new_envelope=envelope,
            audit_maxlen=self.settings.audit_maxlen,
            expired_result=dumps(EXPIRED_RESULT),
            message=message,
            approvals_read=parked.record.get("approvers", ""),
            approvals_new=dumps([*tally.prior, own]),
            final=tally.final,
            new_digest=new_digest or "",
            approval=approval,
            run_id=parked.envelope.run_id,
            tool=parked.envelope.name,
            audit_sig=self._audit_sig(*_audited(parked, by, tally.outcome(decision), tally, ts)),
            expired_sig=self._audit_sig(*_audited(parked, by, AuditOutcome.EXPIRED, None, ts)),
            digest=tally.digest,
            shown=parked.digest,
        )
        reply = self._commit(committed, parked.envelope.tenant)
        if reply.outcome == "ok" and message and parked.record.get("lane"):
            # DECIDE put the approved call in its tenant's backlog: admit now, not at the
            # next sweep
            Admission(self.store).admit_soon([lane])
        if reply.outcome in ("ok", "partial", "retry"):
            return reply.outcome
        raise self._refusal(parked, by, reply)

    def _tally(
        self,
        parked: Parked,
        decision: scripts.DecisionKind,
        by: str,
        new_digest: str | None,
    ) -> Tally:
        """The approvals with ``by``'s decision counted; a second approval by ``by`` raises."""
        prior = _distinct(parked.approvals, parked.digest)
        names = [str(a.get("by")) for a in prior]
        pending = parked.record.get("status") == CallStatus.AWAITING_APPROVAL.value
        if decision == "approve" and new_digest is None and by in names and pending:
            refusal = AuditOutcome.refused(REFUSED_SAME_APPROVER)
            self._audit(self._request(parked.record), by, refusal)
            raise NotAuthorizedError(
                f"{by!r} already approved call {parked.envelope.call_id}; a second, distinct "
                "approver is needed",
                call_id=parked.envelope.call_id,
                by=by,
            )
        if new_digest is not None:
            prior, names = [], []  # an edit resets the others: they approved other arguments
        names.append(by)
        final = decision == "deny" or len(names) >= self._required(parked)
        return Tally(prior, names, final, new_digest or parked.digest)

    def _sign(
        self, parked: Parked, decision: scripts.DecisionKind, by: str, tally: Tally, ts: str
    ) -> tuple[dict[str, Any], str]:
        """``by``'s approval as stored with the others, and the signed final decision (JSON).

        The decision is signed only when it is final (``""`` otherwise, or unsigned).
        """
        if self.signer is None and not self._warned:
            self._warned = True
            log.warning(
                "deciding without TOOLQ_APPROVAL_SIGNING_KEY: decisions are unsigned, and "
                "workers that verify approvals will refuse the calls approved here"
            )
        own: dict[str, Any] = {"by": by, "digest": tally.digest, "ts": ts}
        facts = {**parked.facts, "digest": tally.digest}
        sig = self.authority.sign_approval(facts, by, ts)
        if sig is not None:
            own["sig"] = sig
        if not tally.final:
            return own, ""
        signed = self.authority.sign_decision(facts, decision, tally.names, by, ts)
        return own, dumps(signed) if signed is not None else ""

    def _commit(self, decision: scripts.Decision, tenant: str) -> scripts.DecideReply:
        """Run DECIDE, and WAIT for the replicas on its connection in the same round trip."""
        acks = self.store.acks
        (reply,), acked = self.scripts.pipelined_after(
            [scripts.DECIDE(keys=self.keys, decision=decision, tenant=tenant)], acks.commands()
        )
        if reply.outcome in ("ok", "partial") and acked:
            acks.check(acked[-1], f"decision on call {decision.call_id}")
        return reply

    def _refusal(self, parked: Parked, by: str, reply: scripts.DecideReply) -> ToolqError:
        """The error for a decision DECIDE refused, audited when the call is still there."""
        call_id = parked.envelope.call_id
        if reply.outcome == "missing":
            return CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        if reply.outcome == "expired":
            return ApprovalExpiredError(
                f"call {call_id} expired before it was decided", call_id=call_id
            )
        request = self._request(parked.record)
        if reply.outcome == "digest":
            self._audit(request, by, AuditOutcome.refused(DigestMismatchError.code))
            return DigestMismatchError(
                f"call {call_id}: the call (its tool or arguments) changed since it was shown; "
                "review the call again",
                call_id=call_id,
                digest=parked.digest,
            )
        status = reply.value
        self._audit(request, by, AuditOutcome.refused(status))
        return NotAwaitingApprovalError(
            f"call {call_id} is {status}, not awaiting approval",
            call_id=call_id,
            status=status,
        )

    def refused(self, call_id: str, by: str, code: str) -> None:
        """Audit a decision refused before it reached the call (signed, as every refusal).

        For the refusals a front end makes itself: an approval without the digest its
        approver reviewed, a decision token's holder asking for an edit or a sticky rule.
        Nothing is audited for a call that is not parked (there is nothing it could decide).
        """
        try:
            request = self.get(call_id)
        except ToolqError:
            return
        if request.status is CallStatus.AWAITING_APPROVAL:
            self._audit(request, by, AuditOutcome.refused(code))

    def _audit_sig(
        self, call_id: str, run_id: str, tool: str, by: str, outcome: str, digest: str, ts: str
    ) -> str:
        if self.signer is None:
            return ""
        fields = audit_fields(call_id, run_id, tool, by, outcome, digest, ts)
        return str(self.signer.sign("audit", **fields)["sig"])

    def _audit(self, request: ApprovalRequest, by: str, outcome: str) -> None:
        ts = repr(time.time())
        fields = audit_fields(
            request.call_id, request.run_id, request.name, by, outcome, request.digest, ts
        )
        self.audit_log.append({**fields, "sig": self._audit_sig(**fields)})


__all__ = [
    "EXPIRED_RESULT",
    "ApprovalStore",
    "Parked",
    "audit_fields",
    "digest_call",
    "to_request",
]
