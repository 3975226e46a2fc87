"""A person's signed approval of an undo: a gated tool's undo handler runs only with one.

An undo handler is its tool's own code, run on the undo data the call's worker stored,
which anyone who can write to Redis can rewrite. So for a gated tool (DANGEROUS, or one the
default policy parks: ``Client.undo_gate``) a worker with verify keys runs it only with a
signature by one of those keys (kind ``undo``) over this call's facts (``call_facts``: id,
run, tool, the worker's own risk for it, the digest of its tool and arguments, submitter,
tenant), the digest of the undo data it is about to pass (``undo_digest``) and the approver
who asked. A deciding process signs one (``sign_undo``) when an approver of the call's risk
asks for the undo: the API for its caller (whose approver role the route checks), a process
holding ``TOOLQ_APPROVAL_SIGNING_KEY`` for the ``approved_by`` it names; never for the
call's submitter (as for a decision). A DANGEROUS tool's undo needs as many distinct
approvers as its calls (``TOOLQ_DANGEROUS_APPROVALS``): their approvals wait on the record
until enough asked (``UndoStore.vote``), then go to the worker as a JSON list. The
signature binds the undo data as the API read it, which must be the data the approver
reviewed (``Client.undo_data``; the digest sent back as ``shown``, else
``DigestMismatchError``, no undo requested): data rewritten after that is refused. Like a
call's own approval, it can be replayed on the same call by a Redis writer who sets the
undo back to requested with the same undo data.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from toolq.approvals.models import visible
from toolq.approvals.store import ApprovalStore
from toolq.errors import NotAuthorizedError
from toolq.models import CallEnvelope, RiskLevel
from toolq.results.store import dumps
from toolq.signing import SIGNED_MAX_BYTES, Verifier, call_facts


def undo_digest(raw: bytes | str) -> str:
    """The digest of a call's undo data, as stored (SHA-256, hex)."""
    return hashlib.sha256(raw.encode() if isinstance(raw, str) else raw).hexdigest()


def check_reader(approvals: ApprovalStore, call_id: str, by: str) -> None:
    """Raise ``NotAuthorizedError`` unless ``by`` may ask for the call's undo (``sign_undo``).

    Who may see a gated call's undo data (what the call overwrote): the approvers who may
    undo it, checked as ``sign_undo`` checks them (not its submitter; ``TOOLQ_APPROVERS``
    of its risk when set), without signing or auditing anything.
    """
    parked = approvals._read(call_id)
    reason = approvals.policy.refusal(parked.risk, parked.envelope.principal, by)
    if reason is not None:
        raise NotAuthorizedError(
            f"{by!r} may not undo call {call_id}, nor see its undo data: "
            f"{reason.replace('_', ' ')}",
            call_id=call_id,
        )


def undo_text(raw: bytes | str, max_depth: int) -> tuple[Any, str]:
    """The undo data ``raw`` as an approver is shown it: ``(data, text)``.

    ``text`` is what the handler will get, whole: strict JSON (no ``NaN`` or ``Infinity``,
    nested at most ``max_depth`` deep) indented, with ``data`` parsed; anything else (which
    no worker stores) as the stored text itself, with ``data`` None, so an approver never
    sees a tidier value than the one that runs. Characters that reorder or hide text are
    shown as JSON escapes (``visible``), as in a call's ``arguments_text``.
    """
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    try:
        data = json.loads(text, parse_constant=_not_json)
        if _depth(data) > max_depth:
            return None, visible(text, "\n\t")
        return data, visible(json.dumps(data, indent=2, ensure_ascii=False), "\n")
    except (ValueError, RecursionError):
        return None, visible(text, "\n\t")


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (iteratively: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
    return deepest


def sign_undo(approvals: ApprovalStore, call_id: str, by: str, raw: bytes | str) -> str:
    """The stored form of ``by``'s approval to undo ``call_id`` with the undo data ``raw``.

    ``by`` must be one who may decide the call (``NotAuthorizedError``, audited, as a
    decision's refusal): not its submitter, and among ``TOOLQ_APPROVERS`` of its risk when
    those are set. Signed with the process's signing key; without one, an unsigned payload
    of the same fields, which a worker with verify keys refuses (as it refuses unsigned
    decisions).
    """
    parked = approvals._read(call_id)
    approvals._authorize(parked, by)
    fields: dict[str, Any] = {
        **parked.facts,
        "undo_digest": undo_digest(raw),
        "by": by,
        "ts": repr(time.time()),
    }
    if approvals.signer is None:
        return dumps({"payload": {**fields, "kind": "undo"}})
    return dumps(approvals.signer.sign("undo", **fields))


MOST_APPROVALS = 32
"""Most approvals of one undo looked at (a quorum is a few people): a Redis writer's long
list costs a worker or an approver's request no more than that. Junk in the first places
can keep later genuine approvals from counting (as deleting them could): the asker's own
goes first (``UndoStore.vote``)."""


def undo_refusal(
    envelope: CallEnvelope,
    risk: RiskLevel,
    digest: str,
    raw: bytes | str,
    approval: Any,
    verifier: Verifier,
    required: int = 1,
    max_age: float | None = None,
) -> str | None:
    """Why a worker must not run the undo handler of this gated call, or None when it may.

    ``risk``: the worker's own registry's for the tool; ``digest``: of the call's tool and
    arguments as stored; ``raw``: the undo data it would pass; ``approval``: the record's
    ``undo_approval``, one signed approval or a JSON list of them (the first
    ``MOST_APPROVALS``); ``required``: the distinct approvers the undo needs (the worker's
    own ``TOOLQ_DANGEROUS_APPROVALS`` for a DANGEROUS tool, as for its calls);
    ``max_age``: seconds an approval stays good by its signed time
    (``TOOLQ_UNDO_APPROVAL_SECONDS``). Approvals that do not hold are not counted.
    """
    if not approval:
        return "the undo of a gated call carries no signed approval"
    approvers: set[str] = set()
    first: str | None = None
    for signed in _approvals(approval):
        by, reason = _approver(envelope, risk, digest, raw, signed, verifier, max_age)
        if by is not None:
            approvers.add(by)
        first = first or reason
    if len(approvers) >= required:
        return None
    if first is not None and not approvers:
        return first
    return f"{required} distinct approvers are needed for this undo, {len(approvers)} approved it"


def held_approvals(
    envelope: CallEnvelope,
    risk: RiskLevel,
    digest: str,
    raw: bytes | str,
    approvals: list[str],
    verifier: Verifier | None,
    max_age: float | None = None,
) -> dict[str, str]:
    """The approvals of ``approvals`` that hold for this call and undo data, by approver.

    The first ``MOST_APPROVALS``. Without a verifier (a process without verify keys) each
    is taken at its word, by the approver its payload names: the workers verify them anyway.
    """
    held: dict[str, str] = {}
    for signed in approvals[:MOST_APPROVALS]:
        by, _ = _approver(envelope, risk, digest, raw, signed, verifier, max_age)
        if by is not None:
            held.setdefault(by, signed)
    return held


def _unverified(signed: Any) -> dict[str, Any]:
    """The payload a stored approval names, unchecked ({} for anything else)."""
    if not isinstance(signed, str | bytes) or len(signed) > SIGNED_MAX_BYTES:
        return {}
    try:
        value = json.loads(signed)
    except (ValueError, RecursionError):
        return {}
    payload = value.get("payload") if isinstance(value, dict) else None
    return payload if isinstance(payload, dict) else {}


def _fresh(payload: dict[str, Any], max_age: float | None) -> bool:
    """Whether an approval's signed time is within ``max_age`` seconds of now."""
    if max_age is None:
        return True
    try:
        signed_at = float(payload.get("ts") or "nan")
    except (TypeError, ValueError):
        return False
    return time.time() - max_age <= signed_at <= time.time() + 60  # (clocks a minute apart)


def _approvals(approval: Any) -> list[Any]:
    """A record's ``undo_approval``: one signed approval, or the first ``MOST_APPROVALS``."""
    if isinstance(approval, str | bytes) and len(approval) > SIGNED_MAX_BYTES * MOST_APPROVALS:
        return []
    try:
        value = json.loads(approval) if isinstance(approval, str | bytes) else approval
    except (ValueError, RecursionError):
        return [approval]
    return value[:MOST_APPROVALS] if isinstance(value, list) else [value]


def _approver(
    envelope: CallEnvelope,
    risk: RiskLevel,
    digest: str,
    raw: bytes | str,
    signed: Any,
    verifier: Verifier | None,
    max_age: float | None = None,
) -> tuple[str | None, str | None]:
    """``(approver, None)`` when one stored approval approves this undo, else ``(None, why)``.

    Its signature checked once, by ``verifier``; without one (a process without verify
    keys) the payload is taken at its word: the workers verify it anyway.
    """
    payload = verifier.payload(signed, "undo") if verifier is not None else _unverified(signed)
    if not payload:
        return None, "the undo approval's signature is invalid or not made by a trusted key"
    if not _fresh(payload, max_age):
        return None, (
            f"the undo approval was signed more than {max_age:g} s ago "
            "(TOOLQ_UNDO_APPROVAL_SECONDS): ask again"
        )
    for fact, value in call_facts(envelope, risk, digest).items():
        if payload.get(fact) != value:
            return None, f"the undo approval does not match this call's {fact}"
    if payload.get("undo_digest") != undo_digest(raw):
        return None, "the undo data changed after the undo was approved"
    by = payload.get("by")
    if not isinstance(by, str) or not by:
        return None, "the undo approval names no approver"
    return by, None
