"""Verifying the audit stream: every entry a deciding process wrote carries its signature.

Deciding processes sign each entry they write (in Python, or passed into the Lua script
that writes it, so the signed fields are exactly the stored ones). Workers and the sweeper
hold no signing key: their entries (an expiry, a call refused as ``approval_unverified``)
are marked ``system`` and counted apart, as are run-ownership refusals written by a process
without the key; a ``system`` mark on any other outcome counts as unsigned, as does any
other entry without a signature.
"""

from __future__ import annotations

from typing import Any

import redis
from pydantic import BaseModel, Field

from toolq.errors import ApprovalUnverifiedError, NotRunOwnerError
from toolq.keys import Keys
from toolq.models import AuditOutcome
from toolq.results.connection import as_text
from toolq.settings import Settings
from toolq.signing import VERSIONS, Verifier

SYSTEM_OUTCOMES = frozenset(
    {
        ("sweeper", AuditOutcome.EXPIRED.value),
        ("worker", AuditOutcome.refused(ApprovalUnverifiedError.code)),
    }
)
"""(by, outcome) of the entries workers and the sweeper write without a signature."""
UNSIGNED_REFUSALS = frozenset({AuditOutcome.refused(NotRunOwnerError.code)})
"""Refusals a process without the signing key (a submitter's) may write as system entries."""
SIGNED_FIELDS = ("call_id", "run_id", "tool", "by", "outcome", "digest", "ts")


class AuditReport(BaseModel):
    """Counts of ``toolq approvals verify-audit``."""

    total: int = 0
    valid: int = 0
    invalid: int = 0
    unsigned: int = 0
    unsigned_system: int = 0
    bad_ids: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no entry is forged, altered or unexpectedly unsigned."""
        return self.invalid == 0 and self.unsigned == 0

    def merged(self, other: AuditReport) -> AuditReport:
        """The counts of two audit streams together (cells: one stream each)."""
        return AuditReport(
            total=self.total + other.total,
            valid=self.valid + other.valid,
            invalid=self.invalid + other.invalid,
            unsigned=self.unsigned + other.unsigned,
            unsigned_system=self.unsigned_system + other.unsigned_system,
            bad_ids=[*self.bad_ids, *other.bad_ids],
        )


def check_entry(fields: dict[str, str], verifier: Verifier) -> str:
    """``valid``, ``invalid``, ``unsigned`` or ``unsigned_system`` for one entry."""
    sig = fields.get("sig", "")
    if not sig:
        system = fields.get("system") == "1"
        key = (fields.get("by", ""), fields.get("outcome", ""))
        allowed = key in SYSTEM_OUTCOMES or key[1] in UNSIGNED_REFUSALS
        return "unsigned_system" if system and allowed else "unsigned"
    payload: dict[str, Any] = {name: fields.get(name, "") for name in SIGNED_FIELDS}
    payload.update(v=VERSIONS["audit"], kind="audit")
    return "valid" if verifier.valid(payload, sig) else "invalid"


def verify_audit(client: redis.Redis, settings: Settings, verifier: Verifier) -> AuditReport:
    """Check the whole audit stream, oldest first."""
    stream = Keys(settings.key_prefix).audit_stream
    report = AuditReport()
    start = "-"
    while True:
        entries: Any = client.xrange(stream, min=start, count=1000)
        if not entries:
            return report
        for entry_id, raw in entries:
            fields = {as_text(k): as_text(v) for k, v in raw.items()}
            verdict = check_entry(fields, verifier)
            report.total += 1
            setattr(report, verdict, getattr(report, verdict) + 1)
            if verdict in ("invalid", "unsigned"):
                report.bad_ids.append(as_text(entry_id))
        start = f"({as_text(entries[-1][0])}"
