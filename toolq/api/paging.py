"""Paged list responses: the body a JSON list, the page's place in the headers.

``X-Next-Cursor`` (absent on the last page) is what ``?cursor=`` takes for the next page,
``Link: <...>; rel="next"`` the same request with it, and ``X-Total-Count`` how many
entries match in all (absent when counting them would mean reading them all).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Query, Request
from fastapi.responses import JSONResponse

from toolq.results.paging import DEFAULT_LIMIT, MAX_LIMIT, Page, parse_time

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"Entries per page (1..{MAX_LIMIT}).")]
PageCursor = Annotated[
    str | None,
    Query(max_length=1024, description="The previous page's X-Next-Cursor."),
]
TimeBound = Annotated[
    str | None,
    Query(max_length=64, description="ISO-8601 (UTC unless it says) or epoch seconds."),
]
DEFAULT = DEFAULT_LIMIT
"""``limit`` when the request names none."""


def time_bounds(since: str | None, until: str | None) -> tuple[float | None, float | None]:
    """``since`` and ``until`` as epoch seconds (``PayloadError``, a 400, when unreadable)."""
    return parse_time(since, "since"), parse_time(until, "until")


def paged(
    request: Request,
    page: Page[Any],
    body: list[Any],
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """``body`` (the page's items as JSON) with the page's headers."""
    out = dict(headers or {})
    if page.total is not None:
        out["X-Total-Count"] = str(page.total)
    if page.next_cursor is not None:
        out["X-Next-Cursor"] = page.next_cursor
        params = dict(request.query_params)
        params["cursor"] = page.next_cursor
        out["Link"] = f'<{request.url.path}?{urlencode(params)}>; rel="next"'
    return JSONResponse(body, headers=out)
