"""``toolq approvals approve`` through the console script, against a worker that verifies.

The CLI never reports an approval that such a worker would refuse: without a signing key
and without the API it refuses in one line and the call stays parked; signed with the key
over the registry's risk, or made by the API as the token's holder, the call runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import ROOT, SECRETS_KEY, Workers, make_settings, serve
from toolq import CallStatus, Client
from toolq.api.app import create_app
from toolq.keys import Keys
from toolq.settings import ApiToken, Settings
from toolq.signing import generate_pair

pytestmark = pytest.mark.e2e

SCRIPT = Path(sys.executable).with_name("toolq")


def toolq(*args: str, settings: Settings, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in ("TOOLQ_APP", "TOOLQ_APPROVAL_SIGNING_KEY", "TOOLQ_API_TOKEN")
    }
    environ.update(
        {
            "TOOLQ_REDIS_URL": settings.redis_url,
            "PYTHONPATH": str(ROOT),
            "TOOLQ_SECRETS_KEY": SECRETS_KEY,
            **env,
        }
    )
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "toolq"]
    return subprocess.run(
        [*command, *args], env=environ, cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def parked(client: Client, tool_call_id: str) -> str:
    batch = client.dispatch(
        [{"id": tool_call_id, "name": "wipe", "arguments": {"target": tool_call_id}}],
        principal="agent",
    )
    return batch.call_ids[0]


def wait_final(client: Client, call_id: str) -> CallStatus:
    deadline = time.monotonic() + 30
    while not (found := client.result(call_id)).status.is_final:
        assert time.monotonic() < deadline, found
        time.sleep(0.05)
    return found.status


def status(r: redis.Redis, call_id: str) -> bytes | None:
    return r.hget(Keys().call(call_id), "status")  # type: ignore[return-value]


def test_approve_is_signed_or_refused_never_reported_and_then_refused(
    settings: Settings, workers: Workers, r: redis.Redis
) -> None:
    from tests.apps import registry

    signing, verify = generate_pair()
    workers.start(TOOLQ_APPROVAL_VERIFY_KEYS=verify)
    with Client(registry, settings) as client:
        first, second, third = (parked(client, name) for name in ("a1", "a2", "a3"))

        bare = toolq("approvals", "approve", first, "--by", "alice", settings=settings)
        assert bare.returncode == 1, bare
        assert bare.stdout == "" and len(bare.stderr.strip().splitlines()) == 1, bare.stderr
        assert "TOOLQ_APPROVAL_SIGNING_KEY" in bare.stderr and "--api" in bare.stderr
        # --unsigned is for workers that verify nothing; this one verifies.
        unsigned = toolq("approvals", "approve", first, "--unsigned", settings=settings)
        assert unsigned.returncode == 1 and "verifies approvals" in unsigned.stderr
        assert status(r, first) == b"awaiting_approval"

        signed = toolq(
            "approvals",
            "approve",
            first,
            "--by",
            "alice",
            settings=settings,
            TOOLQ_APPROVAL_SIGNING_KEY=signing,
            TOOLQ_APP="tests.apps:registry",
        )
        assert signed.returncode == 0, signed.stderr
        assert signed.stdout.startswith(f"approved {first}: ")
        assert wait_final(client, first) is CallStatus.SUCCEEDED

        # Through the API: it signs, as the token's holder; the CLI needs neither key nor app.
        tokens = {
            "alice-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"]),
            "sam-t": ApiToken(principal="sam", roles=["viewer", "approver:safe"]),
        }
        api_settings = make_settings(approval_signing_key=signing)
        for api in serve(create_app(api_settings, registry, tokens=tokens)):
            forbidden = toolq(
                "approvals", "approve", second, "--api", api, "--token", "sam-t", settings=settings
            )
            assert forbidden.returncode == 1 and "403" in forbidden.stderr
            assert status(r, second) == b"awaiting_approval"
            through = toolq(
                "approvals",
                "approve",
                second,
                settings=settings,
                TOOLQ_API_URL=api,
                TOOLQ_API_TOKEN="alice-t",
            )
            assert through.returncode == 0, through.stderr
            assert through.stdout.startswith(f"approved {second}: ")
            assert wait_final(client, second) is CallStatus.SUCCEEDED
        assert status(r, third) == b"awaiting_approval"
