"""Call ids as people type them: the full id, or a unique prefix (the dashboard shows 8)."""

from __future__ import annotations

import redis

from toolq.dispatch.client import Client
from toolq.errors import AmbiguousIdError, CallNotFoundError
from toolq.keys import Keys
from toolq.results.connection import as_text

MIN_PREFIX = 4
"""Shorter prefixes match too much to be typed on purpose."""
SHOWN = 5
"""Candidates named when a prefix is ambiguous."""


def is_full_id(given: str) -> bool:
    """Whether ``given`` has the form of a whole call id (``toolq.models.new_id``: 32 hex)."""
    return len(given) == 32 and all(c in "0123456789abcdef" for c in given)


def resolve_call_id(client: redis.Redis, keys: Keys, given: str) -> str:
    """The one call id ``given`` is or starts.

    Raises ``CallNotFoundError`` (no match) or ``AmbiguousIdError`` (several).
    """
    if client.exists(keys.call(given)) or len(given) < MIN_PREFIX:
        return given  # a short unknown id is reported as unknown by the command itself
    stem = len(keys.call(""))
    found = sorted(
        {as_text(key)[stem:] for key in client.scan_iter(match=keys.call_match(given), count=1000)}
    )
    if not found:
        raise CallNotFoundError(f"no call id is or starts with {given!r}", call_id=given)
    if len(found) > 1:
        shown = ", ".join(found[:SHOWN]) + (", …" if len(found) > SHOWN else "")
        raise AmbiguousIdError(
            f"call id prefix {given!r} matches {len(found)} calls ({shown}); type more of it"
        )
    return found[0]


def resolve_in(client: Client, given: str) -> str:
    """``resolve_call_id`` in the one cell that holds the call, or in every cell that answers.

    An unknown id is returned as given: the command reading it says it is unknown.
    """
    found: set[str] = set()
    unknown: CallNotFoundError | None = None
    reachable, down = client.reachable()
    for _, cell in reachable:
        try:
            found.add(resolve_call_id(cell.redis, cell.keys, given))
        except CallNotFoundError as exc:
            if cell.store.records([given], confirm=False)[0] is not None:
                return given  # archived: in the history store, no longer in Redis
            unknown = exc
    if not found and unknown is not None and not down:
        raise unknown
    if len(found) > 1:
        shown = ", ".join(sorted(found))
        raise AmbiguousIdError(
            f"call id prefix {given!r} matches {len(found)} calls ({shown}); type more of it"
        )
    return found.pop() if found else given
