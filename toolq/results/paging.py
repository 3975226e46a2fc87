"""Cursor pages over the sorted-set indexes: ``Cursor``, ``Page``, ``walk``, time bounds.

A cursor is the ``(score, member)`` of the last entry a page showed, opaque to clients
(URL-safe base64 of JSON). The next page starts right after that entry (``page.lua``),
so entries added meanwhile never repeat or hide the ones a walk has not reached.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

from toolq.errors import PayloadError
from toolq.results.runner import Scripts
from toolq.results.scripts.paging import PAGE

T = TypeVar("T")

DEFAULT_LIMIT = 100
"""Entries in a page when the client names no ``limit``."""
MAX_LIMIT = 1000
"""The largest ``limit`` a client may ask for."""
SCAN_BUDGET = 5000
"""Index entries one page request reads at most while filters skip entries; past it the
page ends early (possibly empty) with a cursor to go on from."""


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the last entry's score (as Redis writes it) and member."""

    score: str
    member: str

    def encode(self) -> str:
        """The opaque text clients send back as ``cursor``."""
        raw = json.dumps([self.score, self.member], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """The cursor ``encode`` made; ``PayloadError`` for anything else."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            score, member = json.loads(raw)
            if not isinstance(score, str) or not isinstance(member, str):
                raise ValueError(score)
            if not math.isfinite(float(score)):
                raise ValueError(score)
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
            raise PayloadError(
                f"invalid cursor {text[:60]!r}: pass the X-Next-Cursor of the previous page"
            ) from None
        return cls(score, member)


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing: its items, the cursor of the next page, and the total."""

    items: list[T]
    next_cursor: str | None
    """``None`` on the last page."""
    total: int | None
    """How many entries match in all (``None``: not counted for these filters)."""


def check_limit(limit: int) -> int:
    """``limit`` if it is within 1..``MAX_LIMIT``; else ``PayloadError``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise PayloadError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


def parse_time(value: str | float | None, name: str) -> float | None:
    """Epoch seconds from ISO-8601 (UTC unless it says) or epoch seconds; ``None`` passes."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            try:
                moment = datetime.fromisoformat(text)
            except ValueError:
                raise PayloadError(
                    f"{name} must be ISO-8601 (2026-11-25T10:00:00Z) or epoch seconds, "
                    f"not {text[:60]!r}"
                ) from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            number = moment.timestamp()
    if not math.isfinite(number):
        raise PayloadError(f"{name} must be a finite time, not {value!r}")
    return number


def bounds(since: float | None, until: float | None) -> tuple[str, str]:
    """Score bounds for Redis (``-inf``/``+inf`` when open); ``PayloadError`` if reversed."""
    if since is not None and until is not None and since > until:
        raise PayloadError(f"since ({since!r}) is after until ({until!r})")
    return (
        "-inf" if since is None else repr(since),
        "+inf" if until is None else repr(until),
    )


def walk(
    scripts: Scripts,
    index: str,
    *,
    cursor: str | None,
    limit: int,
    lo: str = "-inf",
    hi: str = "+inf",
    descending: bool = False,
    keep: Callable[[Sequence[tuple[str, str]]], Sequence[T | None]],
    budget: int = SCAN_BUDGET,
) -> tuple[list[T], str | None]:
    """Up to ``limit`` items of ``index`` after ``cursor``, and the next page's cursor.

    ``keep`` turns a chunk of ``(member, score)`` entries into items (``None`` for an entry
    the filters skip). Once ``budget`` entries were read the page ends early, with a cursor.
    """
    after = Cursor.decode(cursor) if cursor else None
    items: list[T] = []
    position = (after.score, after.member) if after else None
    scanned = 0
    while True:
        want = limit - len(items) + 1
        chunk = scripts.run(
            PAGE(index=index, after=position, lo=lo, hi=hi, count=want, descending=descending)
        )
        for (member, score), item in zip(chunk, keep(chunk), strict=True):
            if len(items) == limit:
                assert position is not None
                return items, Cursor(*position).encode()  # one more entry exists
            scanned += 1
            position = (score, member)
            if item is not None:
                items.append(item)
        if len(chunk) < want:
            return items, None
        if scanned >= budget and position is not None:
            return items, Cursor(*position).encode()


def merge_pages(
    pages: Sequence[Page[T]], limit: int, key: Callable[[T], tuple[float, str]]
) -> Page[T]:
    """Pages of several cells read from one cursor, merged newest first (``key`` descending).

    A cell whose page ended bounds what may be shown, so that no cell's entries are
    skipped; the cursor goes on from the last entry shown, or from that bound.
    """
    ends = [Cursor.decode(p.next_cursor) for p in pages if p.next_cursor]
    end = max(((float(c.score), c.member) for c in ends), default=None)
    found = sorted((item for p in pages for item in p.items), key=key, reverse=True)
    if end is not None:
        found = [item for item in found if key(item) >= end]
    shown = found[:limit]
    next_cursor = None
    if len(found) > limit:
        score, member = key(shown[-1])
        next_cursor = Cursor(repr(score), member).encode()
    elif end is not None:
        next_cursor = Cursor(repr(end[0]), end[1]).encode()
    totals = [p.total for p in pages]
    total = None if None in totals else sum(t for t in totals if t is not None)
    return Page(shown, next_cursor, total)
