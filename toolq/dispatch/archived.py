"""A retried dispatch whose calls left Redis: their idempotency keys, looked up in SQL.

With a history store an archived call's idempotency key gets the hot TTL with its record
(``cool.lua``), after its row, which carries the key's hash and fingerprint, is written. A
dispatch into a run it names (a new run has no calls to repeat) first asks the history
store, in one query, for the keys of all its calls; those found are answered as CREATE
answers a key found in Redis (``dup``, or ``call_id_conflict`` for other arguments) and are
not created. The question comes before the CREATEs: a key missing from SQL then was still in
Redis (it stays there ``hot_seconds`` after its row is written), so CREATE finds it.
"""

from __future__ import annotations

from collections.abc import Sequence

from toolq.errors import CallIdConflictError
from toolq.results.store import CallStore, NewCall

Found = dict[int, tuple[str, str]]
"""By position in the dispatch: CREATE's reply, ``(outcome, existing call id)``."""


def archived_claims(store: CallStore, calls: Sequence[NewCall]) -> Found:
    """The calls of a dispatch whose idempotency keys name archived calls (one query)."""
    if store.cold is None or not calls:
        return {}
    idems = [
        store.keys.idempotency(
            c.envelope.principal, c.envelope.run_id, c.idempotency_key or c.envelope.call_id
        ).rpartition(":")[2]
        for c in calls
    ]
    claims = store.cold.claims(idems)
    found: Found = {}
    for i, (call, idem) in enumerate(zip(calls, idems, strict=True)):
        claim = claims.get(idem)
        if claim is None:
            continue
        call_id, _, claimed = claim
        conflict = bool(call.fingerprint and claimed and claimed != call.fingerprint)
        found[i] = (CallIdConflictError.code if conflict else "dup", call_id)
    return found


def merge(
    found: Found, replies: Sequence[tuple[str, str]], total: int
) -> tuple[list[int], list[tuple[str, str]]]:
    """Where each created call goes among ``total``, and the replies of all ``total``."""
    if not found:
        return list(range(total)), list(replies)
    places = [i for i in range(total) if i not in found]
    out: list[tuple[str, str]] = [("", "")] * total
    for i, reply in zip(places, replies, strict=True):
        out[i] = reply
    for i, reply in found.items():
        out[i] = reply
    return places, out
