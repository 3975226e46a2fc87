"""The API when Redis is gone, and ``/docs`` offline: over real HTTP."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.conftest import make_settings, serve
from toolq.api.app import create_app
from toolq.cli.stack import _free_port
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

TOKENS = {"view-t": ApiToken(principal="watcher", roles=["viewer", "submitter"])}
AUTH = {"Authorization": "Bearer view-t"}


def test_redis_unreachable_is_a_json_503_within_a_second():
    from tests.apps import registry

    settings = make_settings(redis_url=f"redis://:hunter2@127.0.0.1:{_free_port()}/0")
    for url in serve(create_app(settings, registry, tokens=TOKENS)):
        for method, path in [
            ("GET", "/v1/tools"),
            ("GET", "/v1/approvals"),
            ("GET", "/v1/calls/abc"),
            ("POST", "/v1/runs/r/calls"),
            ("GET", "/metrics"),
        ]:
            started = time.monotonic()
            got = httpx.request(method, url + path, headers=AUTH, content=b"[]", timeout=10)
            elapsed = time.monotonic() - started
            assert got.status_code == 503, (path, got.text)
            error = got.json()["error"]
            assert error["code"] == "redis_unavailable"
            assert "redis://:***@127.0.0.1" in error["message"] and "hunter2" not in got.text
            assert elapsed < 4, (path, elapsed)
        started = time.monotonic()
        health = httpx.get(url + "/healthz", timeout=10)
        assert health.status_code == 503 and health.json()["code"] == "redis_unavailable"
        assert time.monotonic() - started < 4


def test_docs_work_offline_with_a_bearer_scheme_and_their_own_csp(settings):
    from tests.apps import registry

    for url in serve(create_app(settings, registry, tokens=TOKENS)):
        page = httpx.get(url + "/docs")
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert "cdn" not in page.text.lower()
        sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sources and all(s.startswith("/docs/") for s in sources)
        for source in sources:
            asset = httpx.get(url + source)
            assert asset.status_code == 200 and len(asset.content) > 100, source
            assert asset.headers["content-security-policy"] == csp
        assert "SwaggerUIBundle" in httpx.get(url + "/docs/swagger-ui-bundle.js").text
        schema = httpx.get(url + "/openapi.json").json()
        assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
        assert schema["paths"]["/v1/tools"]["get"]["security"] == [{"bearer": []}]
        assert schema["paths"]["/metrics"]["get"]["security"] == [{"bearer": []}]


def _watch(page, url: str) -> tuple[list[str], list[str]]:
    """Collect the page's errors (incl. CSP refusals) and its requests outside ``url``."""
    problems: list[str] = []
    outside: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on(
        "console",
        lambda msg: problems.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    page.on(
        "request",
        lambda request: (
            outside.append(request.url) if not request.url.startswith((url, "data:")) else None
        ),
    )
    return problems, outside


def test_docs_render_offline_in_chromium_with_the_authorize_button(settings):
    from pathlib import Path

    from tests.apps import registry

    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip(f"no Chromium at {chromium}")
    sync_api = pytest.importorskip("playwright.sync_api")
    for url in serve(create_app(settings, registry, tokens=TOKENS)):
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(chromium), headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page()
            problems, outside = _watch(page, url)
            page.goto(url + "/docs")
            page.wait_for_selector("button.authorize", timeout=20_000)
            page.wait_for_selector('[data-path="/v1/tools"]', timeout=20_000)
            page.click("button.authorize")
            page.wait_for_selector(".auth-container >> text=bearer", timeout=10_000)
            browser.close()
        assert not outside, f"/docs fetched from elsewhere: {outside}"
        assert not problems, f"/docs had errors: {problems}"
