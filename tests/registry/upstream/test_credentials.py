"""Per-tenant credentials of an upstream server: chosen by tenant, sealed, never shown.

The tokens below are what the HTTP test server accepts; every place toolq writes or
answers is grepped for them (Redis, the worker's debug log, API responses and the
dashboard, the messages rendered for the model).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import SECRETS_KEY, Workers, approve_shown, settings_with_env
from tests.e2e.test_api import TOKENS as API_TOKENS
from tests.e2e.test_api import h
from tests.registry.upstream.conftest import TOKENS, HttpUpstream, records, serve_api
from tests.security.test_secrets import everything_in_redis
from toolq import CallStatus, Client, ToolRegistry
from toolq.cli.common import load_registry
from toolq.dispatch.providers import to_messages
from toolq.execution.context import ToolContext
from toolq.secretbox import SecretBox

pytestmark = pytest.mark.e2e

APP = "tests.registry.upstream.app:make"
ACME, GLOBEX, LISTER = "tok-acme-9f3e7c", "tok-globex-2a8d4b", "tok-lister-5b1d"


def sealed(box: SecretBox, value: str, tenant: str) -> str:
    return box.seal_credential(value, "tickets", tenant, "header:Authorization")


def test_each_tenant_connects_with_its_own_credentials_which_never_show(
    settings, workers: Workers, http_upstream: HttpUpstream, r, tmp_path: Path
) -> None:
    box = SecretBox(SECRETS_KEY)
    server = {
        "name": "tickets",
        "url": http_upstream.url,
        "headers": {"Authorization": f"Bearer {LISTER}"},
        "tenant_headers": {
            "acme": {"Authorization": sealed(box, f"Bearer {ACME}", "acme")},
            "globex": {"Authorization": f"Bearer {GLOBEX}"},
        },
    }
    env = {"TOOLQ_APP": APP, "TOOLQ_MCP_SERVERS": json.dumps([server])}
    log = tmp_path / "worker.log"
    workers.start(log=log, loglevel="debug", **env)
    own = settings_with_env(settings, env)
    registry = load_registry(own.app, own)
    with Client(registry, own) as client, serve_api(own, registry, API_TOKENS) as api:
        runs = {}
        for tenant in ("acme", "globex", "initech"):
            runs[tenant] = client.dispatch(
                [{"id": "w", "name": "tickets_whoami", "arguments": {}}],
                run_id=f"run-{tenant}",
                principal="agent",
                tenant=tenant,
            )
        parked = client.dispatch(
            [{"id": "d", "name": "tickets_delete_note", "arguments": {"name": "todo"}}],
            run_id="run-acme-delete",
            principal="agent",
            tenant="acme",
        )
        results = {tenant: batch.wait(timeout=60)[0] for tenant, batch in runs.items()}
        assert results["acme"].content[0].text == "acme"
        assert results["globex"].content[0].text == "globex"
        refused = results["initech"]
        assert refused.status is CallStatus.FAILED and refused.error_type == "upstream_unavailable"
        assert "no credentials for tenant 'initech'" in (refused.error or "")
        call_id = parked.call_ids[0]
        texts = [
            httpx.get(f"{api}/v1/approvals", headers=h("view-t")).text,
            httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("view-t")).text,
            httpx.get(f"{api}/v1/tools", headers=h("view-t")).text,
            httpx.get(f"{api}/", headers=h("view-t")).text,
            httpx.get(f"{api}/metrics", headers=h("view-t")).text,
        ]
        approved = approve_shown(api, call_id, h("alice-t"))
        assert approved.status_code == 200, approved.text
        assert parked.wait(timeout=60)[0].status is CallStatus.SUCCEEDED
        for run_id in [*(f"run-{t}" for t in runs), "run-acme-delete"]:
            texts += [
                httpx.get(f"{api}/v1/runs/{run_id}/calls", headers=h("view-t")).text,
                httpx.get(
                    f"{api}/v1/runs/{run_id}/events",
                    params={"follow": "false"},
                    headers=h("view-t"),
                ).text,
                httpx.get(f"{api}/v1/runs/{run_id}/messages", headers=h("view-t")).text,
                json.dumps(client.to_messages(run_id, "anthropic")),
                json.dumps([e.model_dump(mode="json") for e in client.events(run_id)]),
            ]
    for toolset in registry.toolsets:
        toolset.close()
    workers.stop_all()
    received = sorted((c["tool"], c["tenant"]) for c in records(http_upstream.record))
    assert received == [("delete_note", "acme"), ("whoami", "acme"), ("whoami", "globex")]
    written = log.read_text(errors="replace")
    assert "HTTP Request: POST" in written  # the log covers the upstream traffic
    for token in TOKENS:
        for text in [*texts, written]:
            assert token not in text
        for blob in everything_in_redis(r):
            assert token.encode() not in blob


def test_a_sealed_credential_opens_only_for_its_tenant_and_key(
    http_upstream: HttpUpstream,
) -> None:
    box = SecretBox(SECRETS_KEY)
    acme_sealed = sealed(box, f"Bearer {ACME}", "acme")
    registry = ToolRegistry()
    toolset = registry.mcp_server(
        "tickets",
        url=http_upstream.url,
        headers={"Authorization": f"Bearer {LISTER}"},
        # A configuration writer copied acme's sealed token to globex's entry.
        tenant_headers={
            "acme": {"Authorization": acme_sealed},
            "globex": {"Authorization": acme_sealed},
        },
        secrets=box,
    )
    try:
        mine = registry.invoke("tickets_whoami", {}, context=ToolContext(tenant="acme"))
        assert mine.content[0].text == "acme"
        moved = registry.invoke("tickets_whoami", {}, context=ToolContext(tenant="globex"))
        assert moved.status is CallStatus.FAILED and moved.error_type == "upstream_unavailable"
        assert "cannot be opened" in (moved.error or "")
        toolset.close()  # new sessions, opened with another key: they open nothing
        toolset.secrets = SecretBox(SecretBox.generate_key())
        other = registry.invoke("tickets_whoami", {}, context=ToolContext(tenant="acme"))
        assert other.status is CallStatus.FAILED and other.error_type == "upstream_unavailable"
        [message] = to_messages([moved], "openai")
        assert ACME not in json.dumps(message) and acme_sealed not in json.dumps(message)
    finally:
        toolset.close()
    assert [c["tenant"] for c in records(http_upstream.record)] == ["acme"]


def test_toolq_keys_seal_reads_stdin_and_binds_server_tenant_and_header(settings) -> None:
    import subprocess
    import sys

    env = {"TOOLQ_SECRETS_KEY": SECRETS_KEY, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolq",
            "keys",
            "seal",
            "--server",
            "tickets",
            "--header",
            "Authorization",
            "--tenant",
            "acme",
        ],
        input=f"Bearer {ACME}\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token.startswith("toolq-sealed:") and ACME not in token
    box = SecretBox(SECRETS_KEY)
    assert box.open_credential(token, "tickets", "acme", "header:Authorization") == f"Bearer {ACME}"
    for wrong in (
        ("other", "acme", "header:Authorization"),
        ("tickets", "globex", "header:Authorization"),
        ("tickets", "acme", "header:X-Api-Key"),
    ):
        with pytest.raises(Exception, match="sealed with another"):
            box.open_credential(token, *wrong)
