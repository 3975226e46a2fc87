"""``GET /v1/history/calls``: search the history store; JSON pages, or JSON lines / CSV export.

A caller bound to a tenant searches its tenant's calls only (naming another: 403
``wrong_tenant``). Paged as the other listings (``X-Next-Cursor``, ``Link``), newest first;
``format=jsonl`` or ``format=csv`` streams every matching call (no paging) for export.
"""

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from toolq.api.auth import Principal
from toolq.api.paging import DEFAULT, Limit, PageCursor, TimeBound, time_bounds
from toolq.api.routes import own_tenant
from toolq.dispatch.client import Client
from toolq.errors import NoHistoryError
from toolq.history.search import CallQuery, csv_text, search_row
from toolq.history.store import HistoryStore

Filter = Annotated[str | None, Query(max_length=200)]


def build_history_router(client: Client, auth: Any) -> APIRouter:
    """The history search endpoint over the client's history store."""
    router = APIRouter(prefix="/v1", tags=["history"])
    Caller = Annotated[Principal, Depends(auth)]

    def store() -> HistoryStore:
        history = client.history
        if history is None:
            raise NoHistoryError("no history store: set TOOLQ_HISTORY_URL")
        return history

    @router.get("/history/calls")
    async def history_calls(
        request: Request,
        caller: Caller,
        run: Filter = None,
        tool: Filter = None,
        status: Filter = None,
        tenant: Filter = None,
        submitter: Filter = None,
        approver: Filter = None,
        since: TimeBound = None,
        until: TimeBound = None,
        error: Filter = None,
        limit: Limit = DEFAULT,
        cursor: PageCursor = None,
        format: Literal["json", "jsonl", "csv"] = "json",
    ) -> Any:
        """Archived calls matching every filter given, newest finished first.

        Filters: run, tool, final status, tenant, submitter (the dispatching principal),
        approver (who decided), ``since``/``until`` (finish time) and ``error`` (text the
        error contains). ``format=jsonl|csv`` exports every match as one download.
        """
        caller.require_viewer()
        start, end = time_bounds(since, until)
        history = store()
        query = CallQuery(
            run=run,
            tool=tool,
            status=status,
            tenant=own_tenant(caller, tenant),
            submitter=submitter,
            approver=approver,
            since=start,
            until=end,
            error=error,
            limit=limit,
            cursor=cursor,
        )
        if format != "json":
            return StreamingResponse(
                _export(history, replace(query, limit=1000), format),
                media_type="text/csv" if format == "csv" else "application/x-ndjson",
                headers={"Content-Disposition": f'attachment; filename="toolq-history.{format}"'},
            )
        found = await run_in_threadpool(history.search, query)
        headers: dict[str, str] = {}
        if found.next_cursor is not None:
            params = {**dict(request.query_params), "cursor": found.next_cursor}
            headers["X-Next-Cursor"] = found.next_cursor
            headers["Link"] = f'<{request.url.path}?{urlencode(params)}>; rel="next"'
        return JSONResponse([search_row(r) for r in found.records], headers=headers)

    return router


def _export(history: HistoryStore, query: CallQuery, format: str) -> Iterator[str]:
    """Every call matching ``query``, page after page, as JSON lines or CSV."""
    first = True
    while True:
        found = history.search(query)
        rows = [search_row(r) for r in found.records]
        if format == "csv":
            yield csv_text(rows, header=first)
        else:
            yield "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        first = False
        if found.next_cursor is None:
            return
        query = replace(query, cursor=found.next_cursor)
