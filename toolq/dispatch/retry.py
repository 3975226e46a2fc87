"""Retrying a call: a new call of the same tool, arguments and run, dispatched as any call.

The new call goes through the dispatcher, so validation, approval rules and budgets apply
to it again (a call that was denied is parked again, not waved through). It keeps the
provider call id (its result answers the same tool call) and is linked both ways: the
new record's ``retry_of`` names the old call, the old record's ``retried_by`` the new one.
A call is retried once: a second retry is refused with the call that retried it. Who
retries claims it first (``Keys.retrying``, for ``CLAIM_SECONDS``): two retries by two
principals (the run's owner and an admin, whose dispatches are two idempotency scopes) would
otherwise both dispatch, and the loser's call, withdrawn when its link failed, could have
started already: an ungated tool run twice for one retry.
"""

from __future__ import annotations

import json
import time

from toolq.dispatch.dispatcher import Dispatcher
from toolq.dispatch.submission import Submission
from toolq.errors import CallCancelledError, CallNotFoundError, NotRetryableError
from toolq.models import CallEnvelope, CallStatus, EventType
from toolq.results import scripts
from toolq.results.owners import RunOwners
from toolq.results.store import CallStore
from toolq.secretbox import SecretBox, open_arguments

CLAIM_SECONDS = 60
"""How long a retry's claim holds (once linked, the call's ``retried_by`` refuses the others)."""

RETRYABLE = (CallStatus.FAILED, CallStatus.DENIED, CallStatus.EXPIRED, CallStatus.CANCELLED)
"""The final states a call can be retried from (a succeeded call has nothing to retry)."""


def retry_call(
    dispatcher: Dispatcher,
    owners: RunOwners,
    call_id: str,
    *,
    principal: str | None,
    admin: bool = False,
) -> str:
    """Dispatch the retry of ``call_id`` as ``principal`` (the run's owner, or ``admin``).

    Returns the new call's id. ``NotRetryableError`` for a call that is not final, that
    succeeded, or that was retried already; ``NotRunOwnerError`` for another's run.
    """
    store = dispatcher.store
    run_id = owners.check_call(call_id, principal, admin=admin, action="retry calls of")
    [record] = store.records([call_id])
    if run_id is None or record is None:
        raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
    status = CallStatus(record["status"])
    if status not in RETRYABLE:
        why = "it succeeded" if status is CallStatus.SUCCEEDED else "it is not final yet"
        raise NotRetryableError(
            f"call {call_id} is {status.value}: {why}; only a failed, denied, expired or "
            "cancelled call can be retried",
            call_id=call_id,
            status=status.value,
        )
    if record.get("retried_by"):
        raise _retried(call_id, record["retried_by"])
    if not store.redis.exists(store.keys.call(call_id)):
        # Archived: the link to its retry could no longer be written on its record.
        raise _archived(call_id, status)
    _claim(store, call_id, principal)
    envelope = CallEnvelope.model_validate_json(record["envelope"])
    arguments = envelope.arguments
    tool = dispatcher.registry.get(envelope.name)
    if tool is not None:
        # Sealed for the old call id: opened in memory, sealed again for the new call.
        arguments = open_arguments(
            SecretBox.from_settings(store.settings), tool, call_id, arguments
        )
    dispatched = dispatcher.dispatch(
        [{"id": envelope.tool_call_id, "name": envelope.name, "arguments": arguments}],
        Submission(
            run_id=run_id,
            principal=principal,
            tenant=envelope.tenant,
            behavior=envelope.behavior,
            idempotency_key=f"retry:{call_id}",
            admin=admin,
        ),
    )
    new_id = dispatched.calls[0].call_id
    keys = store.keys
    # One script: the old record may leave Redis (its hot window) while the retry is
    # dispatched, and a link written then would be a new, TTL-less hash in its place.
    link = store.scripts.run(scripts.LINK_RETRY(keys=keys, old_id=call_id, new_id=new_id))
    if link.outcome == "gone":
        _withdraw(dispatcher, call_id, new_id, "a retry of an archived call")
        raise _archived(call_id, status)
    if link.value != new_id:
        # Another retry of the same call won the race: this one is withdrawn.
        _withdraw(dispatcher, call_id, new_id, "a duplicate retry")
        raise _retried(call_id, link.value)
    if store.redis.exists(keys.history_archive):
        # The archived copy of the old call gets its ``retried_by`` too.
        store.redis.xadd(
            keys.history_archive, {"call_id": call_id, "run_id": run_id, "ts": repr(time.time())}
        )
    return new_id


def _claim(store: CallStore, call_id: str, principal: str | None) -> None:
    """Claim the dispatch of ``call_id``'s retry for ``principal``, or refuse.

    The same principal asking again (a reply it lost, a dispatch that failed) goes on: its
    dispatch is idempotent. Another waits out the claim even when the first dispatch failed
    (it may have written the call before the error reached it).
    """
    key, me = store.keys.retrying(call_id), json.dumps([principal]).encode()
    for _ in range(2):  # a claim that ends between the two reads: claim again
        if store.redis.set(key, me, nx=True, ex=CLAIM_SECONDS):
            return
        holder = store.redis.get(key)
        if holder == me:
            return
        if holder is not None:
            break
    raise NotRetryableError(
        f"call {call_id} is being retried by another principal (or was, in the last "
        f"{CLAIM_SECONDS} s, and failed): its retry is named on the call once linked",
        call_id=call_id,
    )


def _withdraw(dispatcher: Dispatcher, call_id: str, new_id: str, what: str) -> None:
    """Cancel the retry ``new_id`` of ``call_id`` that lost its link (if not started)."""
    dispatcher.store.transition(
        new_id,
        from_states=[CallStatus.QUEUED, CallStatus.AWAITING_APPROVAL],
        to=CallStatus.CANCELLED,
        event=EventType.CANCELLED,
        data={"status": CallStatus.CANCELLED.value},
        result={"error": f"{what} of call {call_id}", "error_type": CallCancelledError.code},
    )


def _archived(call_id: str, status: CallStatus) -> NotRetryableError:
    return NotRetryableError(
        f"call {call_id} is archived (it left Redis after its hot window); dispatch its "
        "tool call anew instead",
        call_id=call_id,
        status=status.value,
    )


def _retried(call_id: str, by: str) -> NotRetryableError:
    return NotRetryableError(
        f"call {call_id} was retried already, by call {by}", call_id=call_id, retried_by=by
    )
