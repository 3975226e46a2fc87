"""``create_app(settings, registry)``: HTTP API, ``/healthz``, ``/metrics``, dashboard."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import redis
from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from toolq.api import docs, errors
from toolq.api.anchoring import AuditAnchors
from toolq.api.approval_page import build_approval_page_router
from toolq.api.auth import Authenticator, ForbiddenError, Principal, load_tokens
from toolq.api.cells import CellParts, cells_health, health_response, needed_queues, unreachable
from toolq.api.dashboard import build_dashboard_router
from toolq.api.decision_tokens import DecisionTokens
from toolq.api.decisions import build_decisions_router
from toolq.api.headers import SecurityHeaders
from toolq.api.history import build_history_router
from toolq.api.limits import BodySizeLimit
from toolq.api.metrics import render
from toolq.api.redis_gate import RedisGate, RedisProbe
from toolq.api.resolving import build_resolve_router
from toolq.api.routes import build_router
from toolq.api.slack import build_slack_router
from toolq.api.tenants import build_tenants_router
from toolq.backend import Backend
from toolq.dispatch.client import Client
from toolq.errors import RedisUnavailableError
from toolq.registry.registry import ToolRegistry
from toolq.settings import ApiToken, Settings
from toolq.workers.health import run_checks_async

HERE = Path(__file__).parent
DASHBOARD = HERE / "dashboard.html"
ASSETS = {
    "dashboard.js": "text/javascript",
    "charts.js": "text/javascript",
    "call.js": "text/javascript",
    "unknown.js": "text/javascript",
    "dashboard.css": "text/css",
    "favicon.svg": "image/svg+xml",
}


def create_app(
    settings: Settings,
    registry: ToolRegistry,
    *,
    tokens: dict[str, ApiToken] | None = None,
    client: Client | None = None,
    backend: Backend | None = None,
) -> FastAPI:
    """The API over one registry; ``tokens`` adds to those from settings.

    Built over ``client``'s backend, else ``backend``, else a new ``Backend``; the app
    closes it on shutdown.
    """
    client = client or Client(registry, settings, backend=backend)
    auth = Authenticator({**load_tokens(settings), **(tokens or {})})
    owned = client
    parts = CellParts(client, settings)
    # One gate checks the client's one Redis before every request; a client over cells has
    # none to check (each request checks the cells it touches).
    target = client.redis_target
    probe = RedisProbe(target) if target is not None else None

    anchors = AuditAnchors(client)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anchors.start()
        yield
        await anchors.stop()
        await parts.close()
        if probe is not None:
            await probe.close()
        owned.close()

    app = FastAPI(
        lifespan=lifespan,
        title="toolq",
        version="0.1.0",
        description="Run LLM tool calls on a distributed queue: dispatch, approve, stream.",
        docs_url=None,  # served by toolq.api.docs from local files
        redoc_url=None,
    )
    errors.install(app, target.describe() if target is not None else "")
    docs.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_payload_bytes)
    if probe is not None:
        app.add_middleware(RedisGate, probe=probe)
    app.add_middleware(SecurityHeaders)
    app.include_router(build_router(client, auth, parts))
    app.include_router(build_decisions_router(client, auth, DecisionTokens(settings)))
    app.include_router(build_resolve_router(client, auth))
    app.include_router(build_dashboard_router(client, auth))
    app.include_router(build_tenants_router(client, auth))
    app.include_router(build_history_router(client, auth))
    app.include_router(build_slack_router(client))
    app.include_router(build_approval_page_router())
    app.state.client = client
    app.state.hub = parts.hubs[0]
    app.state.parts = parts

    queues = needed_queues(client)
    history_alert = settings.history_lag_alert if settings.history_url else None

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        """``ok`` or ``degraded`` (200, each problem with reason and fix); 503: no Redis."""
        if probe is None:
            return await run_in_threadpool(cells_health, client, queues)
        try:
            await probe.check(fresh=0)  # always a fresh PING, answered within ~0.5 s
            checks = await run_checks_async(
                probe.client, client.keys, queues, probe.where, history_alert
            )
        except RedisUnavailableError as exc:
            return unreachable(exc)
        except (redis.RedisError, OSError) as exc:
            return unreachable(RedisUnavailableError(f"Redis at {probe.where}: {exc}"))
        return health_response(checks)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics(caller: Principal = Depends(auth)) -> str:  # noqa: B008
        """Fleet-wide figures of every tenant: not for a token bound to one."""
        caller.require_viewer()
        if caller.tenant is not None:
            raise ForbiddenError(
                f"{caller.name!r} is bound to tenant {caller.tenant!r}; /metrics shows every "
                "tenant (use GET /v1/tenants/{tenant})"
            )
        return await run_in_threadpool(render, client)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> str:
        return DASHBOARD.read_text(encoding="utf-8") if DASHBOARD.exists() else "toolq"

    def asset(name: str) -> Response:
        return Response((HERE / name).read_text(encoding="utf-8"), media_type=ASSETS[name])

    # The page loads its script and stylesheet as files: the CSP allows no inline code.
    for name in ASSETS:
        app.add_api_route(
            f"/{name}", lambda name=name: asset(name), methods=["GET"], include_in_schema=False
        )

    # Browsers ask for /favicon.ico whatever the page links: the same icon, not a 404.
    app.add_api_route(
        "/favicon.ico", lambda: asset("favicon.svg"), methods=["GET"], include_in_schema=False
    )
    return app
