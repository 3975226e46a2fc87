"""Which calls wait for a human: the tool's own rule, per-run rules, then risk."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import redis
from pydantic import BaseModel, Field

from toolq.keys import Keys
from toolq.models import RiskLevel

if TYPE_CHECKING:
    from toolq.registry.tool import Tool


class ApprovalMode(StrEnum):
    """Per-run approval modes."""

    STRICT = "strict"
    """Every call that is not SAFE waits."""
    PERMISSIVE = "permissive"
    """Only DANGEROUS calls wait (the default)."""
    AUTO = "auto"
    """Nothing waits, except tools listed for the run."""


class RunRules(BaseModel):
    """A run's approval settings, stored in Redis so they survive restarts."""

    mode: ApprovalMode | None = None
    approve_tools: list[str] = Field(default_factory=list)
    """Tools that need approval in this run (pai-agent-sdk's ``need_user_approve_tools``)."""
    always_approve: list[str] = Field(default_factory=list)
    always_deny: list[str] = Field(default_factory=list)


class ApprovalPolicy:
    """Decides whether a call is parked for approval."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def run_rules(self, run_id: str) -> RunRules:
        """The run's stored rules (defaults when none were set)."""
        raw = self.redis.get(self.keys.run_settings(run_id))
        return RunRules.model_validate_json(raw) if raw else RunRules()

    def set_run_rules(self, run_id: str, rules: RunRules, ttl: int) -> None:
        """Store a run's rules."""
        self.redis.set(self.keys.run_settings(run_id), rules.model_dump_json(), ex=ttl)

    def needs_approval(self, tool: Tool, arguments: dict[str, Any], rules: RunRules) -> bool:
        """True when this call must wait for a human."""
        if tool.name in rules.always_approve:
            return False
        if tool.name in rules.approve_tools:
            return True
        own = tool.needs_approval(arguments)
        if own is not None:
            return own
        if rules.mode is ApprovalMode.AUTO:
            return False
        if rules.mode is ApprovalMode.STRICT:
            return tool.risk is not RiskLevel.SAFE
        return tool.risk is RiskLevel.DANGEROUS


def dumps_rules(rules: RunRules) -> str:
    """JSON of a run's rules (for export with the run's state)."""
    return json.dumps(rules.model_dump(mode="json"))
