"""What the framework tests share: the workers' execution records, a second process, and
the approvers (the real HTTP API with their tokens, verifying workers)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Any

import redis

from tests.conftest import ROOT, SECRETS_KEY, InProcess, make_settings, serve
from toolq import ApprovalClient, Settings
from toolq.api.app import create_app
from toolq.cli.common import load_registry
from toolq.models import CallResult, RiskLevel
from toolq.settings import ApiToken
from toolq.signing import generate_pair

APPROVER_ROLES = [f"approver:{level.value}" for level in RiskLevel]


def executions(r: redis.Redis, call_id: str) -> list[str]:
    """What the workers recorded for a call (``pid:tag`` per execution)."""
    return [x.decode() for x in r.lrange(f"test:exec:{call_id}", 0, -1)]


def child_env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "TOOLQ_SECRETS_KEY": SECRETS_KEY,
        "PYTHONPATH": str(ROOT),
    }


def run_child(module: str, settings: Settings, *args: str, **env: str) -> str:
    """Run ``python -m module args`` as a separate process; its stdout (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        env={**child_env(settings), **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


APPROVER_TOKENS = {
    "alice-t": ApiToken(principal="alice", roles=["viewer", *APPROVER_ROLES]),
    "bob-t": ApiToken(principal="bob", roles=["viewer", *APPROVER_ROLES]),
}


class Approvers:
    """The people's side of a test: the real HTTP API (the only holder of the signing key),
    workers that verify its signatures, and an ``ApprovalClient`` per approver token.

    The agent's side is the suite's plain ``client`` fixture: Redis credentials only.
    """

    def __init__(self, inproc: InProcess) -> None:
        self.inproc = inproc
        self.url = ""
        self.signing, self.verify = generate_pair()
        self._closing = contextlib.ExitStack()

    def start(self, *, quorum: int = 1, app: str = "tests.apps:registry") -> Approvers:
        """Verifying workers for ``app`` and the API, both with ``quorum`` DANGEROUS approvers."""
        self.inproc.start(app=app, approval_verify_keys=self.verify, dangerous_approvals=quorum)
        settings = make_settings(approval_signing_key=self.signing, dangerous_approvals=quorum)
        api = create_app(settings, load_registry(app), tokens=APPROVER_TOKENS)
        self.url = self._closing.enter_context(contextlib.contextmanager(serve)(api))
        return self

    def person(self, name: str) -> ApprovalClient:
        """``name``'s decisions over HTTP, with their own token (``alice`` or ``bob``)."""
        return self._closing.enter_context(ApprovalClient(self.url, f"{name}-t"))

    def approve_shown(self, name: str, call_id: str, **edit: Any) -> CallResult:
        """``name`` reviews ``call_id`` over HTTP and approves it as shown (its digest)."""
        person = self.person(name)
        return person.approve(call_id, digest=person.get(call_id).digest, **edit)

    def close(self) -> None:
        self._closing.close()
