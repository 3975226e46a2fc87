"""Which calls wait for a human, and who may decide them.

A call's route, first rule that applies: a sticky "always deny/approve this tool in this
run", the run's list of tools needing approval, the tool's own ``requires_approval`` (bool
or predicate on the arguments), the run's mode, then the default: DANGEROUS waits.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

import redis
from pydantic import BaseModel, Field

from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.settings import Settings

if TYPE_CHECKING:
    from toolq.registry.tool import Tool

Route = Literal["run", "park", "deny"]


class ApprovalMode(StrEnum):
    """Per-run approval modes."""

    STRICT = "strict"
    """Every call that is not SAFE waits."""
    PERMISSIVE = "permissive"
    """Only DANGEROUS calls wait (the default)."""
    AUTO = "auto"
    """Nothing waits, except tools listed for the run or that ask for it themselves."""


class RunRules(BaseModel):
    """A run's approval settings, stored in Redis so they survive restarts."""

    mode: ApprovalMode | None = None
    approve_tools: list[str] = Field(default_factory=list)
    """Tools that need approval in this run (pai-agent-sdk's ``need_user_approve_tools``)."""
    always_approve: list[str] = Field(default_factory=list)
    always_deny: list[str] = Field(default_factory=list)
    approval_timeout: float | None = Field(None, gt=0)
    """Deadline for this run's parked calls, in seconds (default: tool's, then settings')."""
    signatures: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Signed rules that loosen the gate (``rule_key`` → signed object); a call that runs
    by such a rule carries its signature, and workers check it."""


def rule_age(payload: dict[str, Any]) -> float:
    """Seconds since a signed rule's payload was signed (infinite when it names no time)."""
    try:
        return time.time() - float(payload["ts"])
    except (KeyError, TypeError, ValueError):
        return math.inf


def rule_key(rule: str, tool: str) -> str:
    """Key of a signed rule in ``RunRules.signatures``: ``always_approve:<tool>``, ..."""
    return f"{rule}:{tool}"


def route(tool: Tool, arguments: dict[str, Any], rules: RunRules) -> Route:
    """Run now, park for approval, or deny by a standing rule (first rule that applies)."""
    if tool.name in rules.always_deny:
        return "deny"
    if tool.name in rules.always_approve:
        return "run"
    if tool.name in rules.approve_tools:
        return "park"
    own = tool.needs_approval(arguments)
    if own is not None:
        return "park" if own else "run"
    if rules.mode is ApprovalMode.AUTO:
        return "run"
    if rules.mode is ApprovalMode.STRICT:
        return "park" if tool.risk is not RiskLevel.SAFE else "run"
    return "park" if tool.risk is RiskLevel.DANGEROUS else "run"


def loosening_signature(tool: Tool, rules: RunRules) -> dict[str, Any] | None:
    """The signed rule that lets a call of ``tool`` run unparked in this run, if any."""
    if tool.name in rules.always_approve:
        return rules.signatures.get(rule_key("always_approve", tool.name))
    if rules.mode is ApprovalMode.AUTO:
        return rules.signatures.get(rule_key("mode_auto", "*"))
    return None


def digest_arguments(arguments: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a call's arguments alone (to compare two of them)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def digest_call(name: str, arguments: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a call's tool and arguments: what an approver approves.

    The tool's name is in it: a call whose tool a Redis writer renames between the
    approver's view and the click (same arguments) has another digest, and is refused as a
    changed call is. Signed decisions carry this digest (``call_facts``).
    """
    canonical = json.dumps(
        {"tool": name, "arguments": arguments},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class ApprovalPolicy:
    """Routes calls (run, park or deny) and says who may decide them."""

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings) -> None:
        self.redis = client
        self.keys = keys
        self.settings = settings

    # -- run rules ---------------------------------------------------------------------------

    def run_rules(self, run_id: str) -> RunRules:
        """The run's stored rules (defaults when none were set)."""
        raw: Any = self.redis.get(self.keys.run_settings(run_id))
        return RunRules.model_validate_json(raw) if raw else RunRules()

    def set_run_rules(self, run_id: str, rules: RunRules) -> RunRules:
        """Replace a run's rules."""
        self.redis.set(
            self.keys.run_settings(run_id), rules.model_dump_json(), ex=self.settings.result_ttl
        )
        return rules

    def update_rules(self, run_id: str, change: Callable[[RunRules], object]) -> RunRules:
        """Change a run's rules atomically (optimistic transaction on the rules key)."""
        key = self.keys.run_settings(run_id)
        updated = RunRules()

        def apply(pipe: Any) -> None:
            nonlocal updated
            raw = pipe.get(key)
            updated = RunRules.model_validate_json(raw) if raw else RunRules()
            change(updated)
            for name in ("always_approve", "always_deny", "approve_tools"):
                setattr(updated, name, sorted(set(getattr(updated, name))))
            pipe.multi()
            pipe.set(key, updated.model_dump_json(), ex=self.settings.result_ttl)

        self.redis.transaction(apply, key)
        return updated

    def export_state(self, run_id: str) -> dict[str, Any]:
        """The run's approval state, to save with a session and restore later."""
        return self.run_rules(run_id).model_dump(mode="json")

    def restore_state(self, run_id: str, state: dict[str, Any]) -> RunRules:
        """Restore what ``export_state`` returned (for this or another run id)."""
        return self.set_run_rules(run_id, RunRules.model_validate(state))

    # -- routing -----------------------------------------------------------------------------

    def route(self, tool: Tool, arguments: dict[str, Any], rules: RunRules) -> Route:
        """Run now, park for approval, or deny by a standing rule."""
        return route(tool, arguments, rules)

    def deadline_seconds(self, tool: Tool, rules: RunRules) -> float:
        """How long a parked call may wait: the tool's, the run's, then the default."""
        return tool.approval_timeout or rules.approval_timeout or self.settings.approval_timeout

    # -- deciders ----------------------------------------------------------------------------

    def refusal(self, risk: RiskLevel, submitter: str | None, by: str) -> str | None:
        """Why ``by`` may not decide a call of ``risk`` submitted by ``submitter`` (or None)."""
        return decider_refusal(self.settings.approvers, risk, submitter, by)


def decider_refusal(
    approvers: dict[str, list[RiskLevel]] | None,
    risk: RiskLevel,
    submitter: str | None,
    by: str,
) -> str | None:
    """Why ``by`` may not decide a call of ``risk`` submitted by ``submitter`` (or None).

    ``approvers``: ``TOOLQ_APPROVERS`` as this process has it now (None: anyone but the
    submitter). Asked of every decision, and of every approval so far that a quorum would
    count (``Authority.verified``): an approver since removed no longer counts.
    """
    if not by:
        return "no_principal"
    if submitter is not None and by == submitter:
        return "self_approval"
    if approvers is not None:
        if by not in approvers:
            return "not_an_approver"
        if risk not in approvers[by]:
            return f"not_allowed_for_{risk.value}"
    return None
