"""``ApprovalGuard``: a worker's own check that a gated call was approved, before it runs.

The worker trusts nothing Redis says about the gate: whether a call is gated comes from
its own registry and the default run rules (stored rules are unsigned data any Redis
writer can change), and a gated call runs only with a signature, by one of the verify
keys, over exactly this call, run, tool, argument digest, submitter and tenant, decided
under the risk the worker's own registry gives the tool (``call_facts``): a final
``approve`` decision with enough distinct approvers for that risk, or a signed rule of this
run, granted to this call's submitter and tenant, that lets the tool through (a sticky
"always approve", or mode ``auto``).
"""

from __future__ import annotations

from typing import Any

from toolq.approvals.policy import (
    ApprovalMode,
    RunRules,
    digest_arguments,
    digest_call,
    route,
    rule_age,
)
from toolq.models import CallEnvelope, RiskLevel
from toolq.registry.tool import Tool
from toolq.settings import Settings
from toolq.signing import VERSIONS, Verifier, call_facts


class ApprovalGuard:
    """Says whether a call is gated and, if so, why its approval does not hold (or None)."""

    def __init__(self, settings: Settings, verifier: Verifier) -> None:
        self.settings = settings
        self.verifier = verifier

    def gated(self, envelope: CallEnvelope, tool: Tool, arguments: dict[str, Any]) -> bool:
        """True when this call may run only with an approval (by the worker's own rules).

        ``arguments`` are the plaintext ones, as a ``requires_approval`` predicate sees them;
        ``tool`` is the one the worker runs (looked up once: an upstream's ``list_changed``
        can change the registry between the gate and the run; an unknown tool is failed
        before the gate, without running anything).
        """
        try:
            return route(tool, arguments, RunRules()) != "run"
        except Exception:  # a predicate that raises cannot clear a call: fail closed
            return True

    def refusal(
        self,
        envelope: CallEnvelope,
        tool: Tool,
        approval: Any,
        arguments: dict[str, Any] | None = None,
        *,
        starting: bool = True,
    ) -> str | None:
        """Why the stored ``approval`` does not cover this call of ``tool``, or None.

        The digest is over the arguments as stored; ``arguments`` (plaintext, default: as
        stored) are what a rule's routing looks at. ``starting``: the call is about to
        start, so a signed rule must be younger than ``TOOLQ_RULE_SECONDS`` (the age bounds
        which calls a rule lets start; a call that ran by a young rule stays approved, say
        for its undo, which a person approves anew).
        """
        if not approval:
            return "the call carries no signed approval"
        digest = digest_call(envelope.name, envelope.arguments)
        decision = self.verifier.payload(approval, "decision")
        if decision is not None:
            return self._decision_refusal(envelope, tool, digest, decision)
        rule = self.verifier.payload(approval, "rule")
        if rule is not None:
            plain = envelope.arguments if arguments is None else arguments
            return self._rule_refusal(envelope, tool, rule, plain, starting)
        for kind in ("decision", "rule"):
            earlier = self.verifier.earlier_version(approval, kind)
            if earlier is not None:
                return (
                    f"the {kind} was signed by an earlier release of toolq ({kind} version "
                    f"{earlier}; this worker reads version {VERSIONS[kind]}): a person must "
                    "approve the call again"
                )
        return "the approval's signature is invalid or not made by a trusted key"

    def _decision_refusal(
        self, envelope: CallEnvelope, tool: Tool, digest: str, payload: dict[str, Any]
    ) -> str | None:
        signed = payload.get("digest")
        if (
            signed != digest  # the old form is hashed only for a decision not of this one
            and set(envelope.arguments) != _CALL_SHAPE
            and signed == digest_arguments(envelope.arguments)
        ):
            # Signed by a release before digest_call (2026-11-27), over the arguments alone:
            # the tool's name is a signed fact beside it (checked below), so it binds the
            # same call. Accepted so that calls approved before a rolling upgrade still run.
            # Never for arguments shaped {"arguments", "tool"}: digest_arguments of those is
            # digest_call of another call's, so any decision this release signs would cover
            # them (a Redis writer's rewrite). Both forms are signed as decision version 2.
            digest = signed
        for fact, value in call_facts(envelope, tool.risk, digest).items():
            if payload.get(fact) != value:
                return _MISMATCH[fact].format(signed=payload.get(fact), mine=value)
        if payload.get("decision") != "approve":
            return "the signed decision is not an approval"
        approvers = payload.get("approvers")
        names = (
            {a for a in approvers if isinstance(a, str) and a}
            if isinstance(approvers, list)
            else set()
        )
        required = self.settings.dangerous_approvals if tool.risk is RiskLevel.DANGEROUS else 1
        if len(names) < required:
            return f"{required} distinct approvers are needed, the approval names {len(names)}"
        return None

    def _rule_refusal(
        self,
        envelope: CallEnvelope,
        tool: Tool,
        payload: dict[str, Any],
        arguments: dict[str, Any],
        starting: bool = True,
    ) -> str | None:
        if payload.get("run_id") != envelope.run_id:
            return "the signed rule belongs to another run"
        # Granted to the run's own calls: not to a call a Redis writer moved in, or over.
        if payload.get("submitter") != envelope.principal:
            return "the signed rule names another submitter"
        if payload.get("tenant") != envelope.tenant:
            return "the signed rule names another tenant"
        if starting and rule_age(payload) > self.settings.rule_seconds:
            return (
                f"the signed rule is older than TOOLQ_RULE_SECONDS "
                f"({self.settings.rule_seconds:g} s): a person must approve again"
            )
        required = self.settings.dangerous_approvals if tool.risk is RiskLevel.DANGEROUS else 1
        if required > 1:
            return f"a signed rule cannot stand in for the {required} approvers this tool needs"
        kind = payload.get("rule")
        if kind == "always_approve" and payload.get("tool") == envelope.name:
            rules = RunRules(always_approve=[envelope.name])
        elif kind == "mode_auto":
            rules = RunRules(mode=ApprovalMode.AUTO)
        else:
            return "the signed rule does not cover this tool"
        try:
            if route(tool, arguments, rules) == "run":
                return None
        except Exception:
            pass
        return "the signed rule does not let this call run without a decision"


_CALL_SHAPE = frozenset({"arguments", "tool"})
"""The keys of what ``digest_call`` hashes: arguments of this shape never take the old form."""

_MISMATCH = {
    "call_id": "the signed approval belongs to another call",
    "run_id": "the signed approval belongs to another call",
    "tool": "the signed approval names another tool",
    "digest": "the arguments differ from the ones approved",
    "risk": "the approval was decided as for a {signed} call, but the tool is {mine} here",
    "submitter": "the signed approval names another submitter ({signed}, not {mine})",
    "tenant": "the signed approval names another tenant ({signed}, not {mine})",
}
"""Why a signed decision does not cover the call, by the first fact that differs."""
