"""``/approve/{call_id}``: one call's approval page, made for a phone.

Every notification links here (Slack's Open button, MCP's URL elicitation). The page is a
static document: it reads the call through the API with the reader's own credential and
decides with it, so only an authenticated approver decides. Either an API token (the
dashboard's sign-in, kept in this browser) or a decision token in the link's fragment
(``#token=tqd_...``: a fragment never reaches a server or its logs), which decides that one
call as the approver it was issued to. It shows the arguments as approvers see them
(secrets masked), the preview and diff, the call's history and who else approved.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

HERE = Path(__file__).parent
PAGE = HERE / "approve.html"
ASSETS = {"approve.js": "text/javascript", "approve.css": "text/css"}
PATHS = frozenset(f"/{name}" for name in ASSETS)
"""The page's own files (with ``/approve/...``: the paths under its Content-Security-Policy)."""


def is_page(path: str) -> bool:
    """True for the approval page and its files."""
    return path in PATHS or path.startswith("/approve/")


def build_approval_page_router() -> APIRouter:
    """The page and its script and stylesheet (files: the CSP allows nothing inline)."""
    router = APIRouter()

    @router.get("/approve/{call_id}", response_class=HTMLResponse, include_in_schema=False)
    def page(call_id: str) -> str:
        return PAGE.read_text(encoding="utf-8")

    def asset(name: str) -> Response:
        return Response((HERE / name).read_text(encoding="utf-8"), media_type=ASSETS[name])

    for name in ASSETS:
        router.add_api_route(
            f"/{name}", lambda name=name: asset(name), methods=["GET"], include_in_schema=False
        )
    return router
