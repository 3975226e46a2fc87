"""What a decision is signed over, and the risk it is decided under.

Redis is not an authority: a call's record (its ``risk``, its approvals so far) is data any
Redis writer can change. A deciding process therefore takes a call's risk from its own
registry, for the approver role, the ``TOOLQ_APPROVERS`` policy and the quorum alike (a tool
it does not know, e.g. the CLI's without ``--app``, is decided as DANGEROUS: the strictest
role and quorum); it counts only the approvals so far whose signatures it can verify; and it
signs the facts of the call as it decided them (``call_facts``): call, run, tool, risk,
argument digest, submitter and tenant, plus, on a final decision, the decision and the
approvers. A worker compares every fact with the call it is about to run and its own
registry (``ApprovalGuard``), so a decision made under a lowered risk, for another
submitter, tool or arguments does not run.

Payloads of kind ``decision`` and ``approval`` are version 2 (``toolq.signing.VERSIONS``):
version 1 bound neither the risk nor the submitter, and is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolq.approvals.policy import decider_refusal
from toolq.models import CallEnvelope, RiskLevel
from toolq.signing import Signer, Verifier, call_facts, parse_public_keys

if TYPE_CHECKING:
    from toolq.registry.registry import ToolRegistry
    from toolq.settings import Settings


def decided_risk(registry: ToolRegistry, tool: str) -> RiskLevel:
    """The risk a call of ``tool`` is decided under: its registry's, else DANGEROUS."""
    found = registry.get(tool)
    return found.risk if found is not None else RiskLevel.DANGEROUS


class Authority:
    """A deciding process's view of a call's risk, its quorum and the signatures it makes."""

    def __init__(self, registry: ToolRegistry, settings: Settings, signer: Signer | None) -> None:
        self.registry = registry
        self.settings = settings
        self.signer = signer
        keys = []
        if signer is not None:
            keys.append(signer.key.public_key())
            if settings.approval_verify_keys and settings.approval_verify_keys.strip():
                keys.extend(parse_public_keys(settings.approval_verify_keys))
        self.verifier = Verifier(keys) if keys else None
        """Checks the approvals so far: this process's own key, and older ones (rotation)."""

    def risk(self, tool: str) -> RiskLevel:
        """The risk a call of ``tool`` is decided under (``decided_risk``)."""
        return decided_risk(self.registry, tool)

    def required(self, tool: str) -> int:
        """Distinct approvers a call of ``tool`` needs."""
        dangerous = self.risk(tool) is RiskLevel.DANGEROUS
        return self.settings.dangerous_approvals if dangerous else 1

    def facts(self, envelope: CallEnvelope, digest: str) -> dict[str, Any]:
        """``call_facts`` of a call as this process decides it."""
        return call_facts(envelope, self.risk(envelope.name), digest)

    def verified(
        self, approvals: list[dict[str, Any]], facts: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The approvals that count for ``facts``: signed for them, by a current approver.

        An approval a Redis writer added, or one made for other facts (another risk,
        submitter or digest, or before version 2), does not count toward a quorum; nor does
        one by an approver this process's ``TOOLQ_APPROVERS`` no longer names for the call's
        risk (removed since they approved). Without a verifier the signatures are not
        checked (the workers check the final decision's).
        """
        risk, submitter = RiskLevel(facts["risk"]), facts["submitter"]
        return [
            approval
            for approval in approvals
            if decider_refusal(self.settings.approvers, risk, submitter, str(approval.get("by")))
            is None
            and (self.verifier is None or self.verifier.approves(facts, approval))
        ]

    def sign_approval(self, facts: dict[str, Any], by: str, ts: str) -> str | None:
        """``by``'s signature over its part of a quorum (None: this process cannot sign)."""
        if self.signer is None:
            return None
        return str(self.signer.sign("approval", **facts, by=by, ts=ts)["sig"])

    def sign_decision(
        self, facts: dict[str, Any], decision: str, approvers: list[str], by: str, ts: str
    ) -> dict[str, Any] | None:
        """The signed final decision a worker checks (None: this process cannot sign)."""
        if self.signer is None:
            return None
        return self.signer.sign(
            "decision", **facts, decision=decision, approvers=approvers, by=by, ts=ts
        )
