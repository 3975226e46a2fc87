"""``/docs``: Swagger UI served from the installed ``swagger-ui-py`` package (works offline).

Its Swagger UI 5 reads FastAPI's OpenAPI 3.1 schema (``swagger-ui-bundle`` ships 4.x, which
cannot).

The OpenAPI schema declares the bearer scheme, so the page's "Authorize" button takes a
token and sends it as ``Authorization: Bearer …``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, Response

HERE = Path(__file__).parent
FILES = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
}
"""Assets taken from the package, by name."""
BEARER = {"bearer": {"type": "http", "scheme": "bearer", "description": "An API token."}}


def _bundle_dir() -> Path:
    import swagger_ui  # type: ignore[import-untyped]

    return Path(swagger_ui.__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Serve ``/docs`` and its assets; add the bearer scheme to ``/openapi.json``."""
    bundle = _bundle_dir()

    def page() -> HTMLResponse:
        return HTMLResponse((HERE / "docs.html").read_text(encoding="utf-8"))

    def script() -> Response:
        return Response((HERE / "docs.js").read_bytes(), media_type="text/javascript")

    def asset(name: str) -> Response:
        return Response(
            (bundle / name).read_bytes(),
            media_type=FILES[name],
            headers={"Cache-Control": "public, max-age=86400"},
        )

    app.add_api_route("/docs", page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/docs/docs.js", script, methods=["GET"], include_in_schema=False)
    for name in FILES:
        app.add_api_route(
            f"/docs/{name}", lambda name=name: asset(name), methods=["GET"], include_in_schema=False
        )

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            built = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            built.setdefault("components", {})["securitySchemes"] = BEARER
            for path, operations in built.get("paths", {}).items():
                if path.startswith("/v1/") or path == "/metrics":
                    for operation in operations.values():
                        operation["security"] = [{"bearer": []}]
            app.openapi_schema = built
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]
