"""Security headers on every response; a strict Content-Security-Policy on each page."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolq.api import approval_page

DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
"""The dashboard loads its own script and stylesheet only; nothing inline, nothing framed."""
API_CSP = "default-src 'none'; frame-ancestors 'none'"
"""JSON and event streams are never documents that load anything."""
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
"""``/docs`` runs Swagger UI from this server's own files (``toolq.api.docs``), nothing else."""
DASHBOARD_PATHS = frozenset(
    {"/", "/dashboard.js", "/charts.js", "/call.js", "/unknown.js", "/dashboard.css"}
)

COMMON = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


class SecurityHeaders:
    """Adds ``nosniff``, ``DENY`` framing, ``no-referrer`` and a CSP to each response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, adding the headers to its response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        extra = list(COMMON)
        if path in DASHBOARD_PATHS or approval_page.is_page(path):
            extra.append((b"content-security-policy", DASHBOARD_CSP.encode()))
        elif path == "/docs" or path.startswith("/docs/"):
            extra.append((b"content-security-policy", DOCS_CSP.encode()))
        else:
            extra.append((b"content-security-policy", API_CSP.encode()))

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)
