"""Verifying the audit stream: its hash chain, and the signatures of deciding processes.

The chain (``toolq.results.audit_chain``) shows entries deleted, altered, reordered or forged
by anyone who does not recompute it; the signatures show which decision entries a deciding
process wrote, which no Redis writer can forge.

Deciding processes sign each entry they write (in Python, or passed into the Lua script
that writes it, so the signed fields are exactly the stored ones). Workers and the sweeper
hold no signing key: their entries (an expiry, a call refused as ``approval_unverified``)
are marked ``system`` and counted apart, as are run-ownership refusals written by a process
without the key; a ``system`` mark on any other outcome counts as unsigned, as does any
other entry without a signature.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import redis
from pydantic import BaseModel, Field

from toolq.errors import ApprovalUnverifiedError, NotRunOwnerError
from toolq.keys import Keys
from toolq.models import AuditOutcome
from toolq.results.audit_chain import ChainHead, ChainReport
from toolq.results.audit_log import Archived, AuditLog
from toolq.settings import Settings
from toolq.signing import VERSIONS, Signer, Verifier

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
    """Counts of ``toolq approvals verify-audit``: signatures, then the chain of each stream."""

    total: int = 0
    valid: int = 0
    invalid: int = 0
    unsigned: int = 0
    unsigned_system: int = 0
    bad_ids: list[str] = Field(default_factory=list)
    signatures_checked: bool = True
    """False with ``--chain-only``: the counts above are not filled."""
    deleted: int = 0
    altered: int = 0
    reordered: int = 0
    forged: int = 0
    chains: list[ChainReport] = Field(default_factory=list)
    """One per stream checked (one per cell)."""

    @property
    def ok(self) -> bool:
        """True when no entry is forged, altered, deleted, reordered or unexpectedly unsigned."""
        signed = self.invalid == 0 and self.unsigned == 0
        return signed and all(chain.ok for chain in self.chains)

    def with_chain(self, chain: ChainReport) -> AuditReport:
        """The report with one more stream's chain counted."""
        return self.model_copy(
            update={
                "deleted": self.deleted + chain.count("deleted"),
                "altered": self.altered + chain.count("altered"),
                "reordered": self.reordered + chain.count("reordered"),
                "forged": self.forged + chain.count("forged"),
                "chains": [*self.chains, chain],
            }
        )

    def merged(self, other: AuditReport) -> AuditReport:
        """The counts of two audit streams together (cells: one stream each)."""
        out = AuditReport(
            total=self.total + other.total,
            valid=self.valid + other.valid,
            invalid=self.invalid + other.invalid,
            unsigned=self.unsigned + other.unsigned,
            unsigned_system=self.unsigned_system + other.unsigned_system,
            bad_ids=[*self.bad_ids, *other.bad_ids],
            signatures_checked=self.signatures_checked and other.signatures_checked,
        )
        for chain in [*self.chains, *other.chains]:
            out = out.with_chain(chain)
        return out


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


def verify_audit(
    client: redis.Redis,
    settings: Settings,
    verifier: Verifier | None,
    source: str = "",
    archived: Archived | None = None,
) -> AuditReport:
    """Check one audit stream: each entry's signature, then its hash chain.

    Signatures are checked oldest first (none when ``verifier`` is None); the chain from
    its start to the head recorded when it is read. With ``archived`` (a history store's
    audit), both run over the archived entries first, then the stream's newer ones.
    """
    log = AuditLog(client, Keys(settings.key_prefix), settings.audit_maxlen)
    report = AuditReport(signatures_checked=verifier is not None)
    anchors: dict[int, str] = {}
    if verifier is not None:
        entries = log.entries()
        if archived is not None:
            entries = itertools.chain(archived.entries(), log.entries(after=archived.mark() or "-"))
        for entry_id, fields in entries:
            verdict = check_entry(fields, verifier)
            report.total += 1
            setattr(report, verdict, getattr(report, verdict) + 1)
            if verdict in ("invalid", "unsigned"):
                report.bad_ids.append(entry_id)
            elif verdict == "valid" and fields.get("outcome") == AuditOutcome.ANCHOR.value:
                seq, _, hash_ = fields.get("digest", "").partition(":")
                if seq.isdigit():
                    anchors[int(seq)] = hash_
    return report.with_chain(log.verify(source, anchors, archived))


def anchor_head(log: AuditLog, signer: Signer, by: str, *, again: bool = True) -> ChainHead | None:
    """Append a signed anchor naming the chain's head (None: the chain is empty).

    ``again=False`` appends nothing (None) when the newest entry is an anchor already, so
    several processes anchoring periodically do not anchor each other's anchors forever.

    The anchor is an ordinary audit entry (outcome ``anchor``, ``digest`` = ``<seq>:<hash>``)
    signed like any other; ``verify-audit`` then reports an entry at or before that seq whose
    hash differs, which is what a chain recomputed by a Redis writer looks like.
    """
    if not again:
        newest = log.last()
        if newest is None or newest.get("outcome") == AuditOutcome.ANCHOR.value:
            return None
    _, head, _ = log.state()
    if head is None:
        return None
    ts = repr(time.time())
    fields = {
        "call_id": "",
        "run_id": "",
        "tool": "",
        "by": by,
        "outcome": AuditOutcome.ANCHOR.value,
        "digest": f"{head.seq}:{head.hash}",
        "ts": ts,
    }
    log.append({**fields, "sig": str(signer.sign("audit", **fields)["sig"])})
    return head
