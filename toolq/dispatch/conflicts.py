"""A call id names one call: the fingerprint a call is claimed with, and a reuse's refusal.

Each call is claimed under an idempotency key (its provider call id, or the client's key and
its position, in the submitter's run) together with its fingerprint: its tool and its
arguments as parsed, before secrets are sealed (sealing is randomized; a retried dispatch
parses to the same arguments). ``create.lua`` compares it with the claim's in the same
script: the same fingerprint is a retried dispatch and gets the same call back; another is
the id reused for another call, refused with nothing written (``CallIdConflictError``), so
an id never hands back, and never lets anyone decide, a call other than the one it named.

A dispatch whose every call conflicts is refused whole. In a dispatch of several calls a
conflicting one is a bad call like any other: it becomes a failed call of its own (never
run, ``call_id_conflict``), claimed under a key of its own so a retry finds it again, and
the batch's other calls go on; the model gets a tool result for each of its tool calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from typing import TYPE_CHECKING, Any

from toolq.errors import CallIdConflictError
from toolq.models import CallStatus, EventType

if TYPE_CHECKING:
    from toolq.registry.tool import Tool
    from toolq.results.store import NewCall
    from toolq.secretbox import SecretBox


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
"""The fingerprint's canonical JSON (keys sorted, compact), its encoder built once."""


def fingerprint(
    box: SecretBox | None, tool: Tool | None, name: str, arguments: dict[str, Any]
) -> str:
    """What a call id names: the call's tool and its arguments as parsed (hex).

    Keyed by ``TOOLQ_SECRETS_KEY`` when it is set, so the claim in Redis holds no hash a
    guess of a secret value could be checked against; without the key secret values are
    masked first (a call with secrets fails without the key anyway: nothing seals them).
    """
    if box is None and tool is not None:
        arguments = tool.redact(arguments, conservative=True)
    data = _CANONICAL.encode([name, arguments])
    if box is not None:
        return box.mac(data.encode())
    return hashlib.sha256(data.encode()).hexdigest()


def conflict_error(new: NewCall, existing: str) -> CallIdConflictError:
    """The refusal of a dispatch whose call reuses the id of the call ``existing``."""
    env = new.envelope
    what = (
        f"call id {env.tool_call_id!r}"
        if new.idempotency_key.startswith(("call:", "rpc-int:"))
        else "idempotency key"
    )
    return CallIdConflictError(
        f"{what} of run {env.run_id!r} already names another call ({existing}) with another "
        f"tool or other arguments than this {env.name!r} call; a call id names one call: "
        "dispatch a new call under a new id",
        call_id=existing,
        tool_call_id=env.tool_call_id,
    )


def refused_call(new: NewCall, existing: str, tool: Tool | None) -> NewCall:
    """The failed call a conflicting call of a batch becomes (nothing of it runs)."""
    error = conflict_error(new, existing)
    env = new.envelope
    arguments = tool.redact(env.arguments, conservative=True) if tool else env.arguments
    envelope = env.model_copy(update={"call_id": uuid.uuid4().hex, "arguments": arguments})
    result = {"error": error.message, "error_type": error.code}
    base = {k: v for k, v in new.event_data.items() if k in _IDENTITY}
    data = {**base, "status": CallStatus.FAILED.value, **result, "arguments": arguments}
    return dataclasses.replace(
        new,
        envelope=envelope,
        status=CallStatus.FAILED,
        event=EventType.FAILED,
        event_data=data,
        result=result,
        deadline=None,
        # its own claim, so a retried batch finds this refusal again
        idempotency_key=f"conflict:{new.fingerprint}:{new.idempotency_key}",
        parking=None,
        approval="",
        notify="",
        message=None,
        charge=None,
        schedule=None,
    )


_IDENTITY = ("name", "tool_call_id", "position", "tenant")
"""The event data a refused call keeps from the call it was dispatched as."""
