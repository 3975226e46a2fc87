"""Secrets in arguments never show up in plaintext in anything toolq writes or answers.

Every Redis key and value is grepped (the call records included: secrets are stored
encrypted), the worker's log at debug level, every API response, for calls in every state
and secrets at any depth. The handlers record a hash of the secret they received, so the
tests can check the real value reached them without it being written anywhere.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.cli.test_cli import toolq  # at import: see tests/conftest.py (CPython 3.11.7)
from tests.conftest import approve_shown
from tests.e2e.test_api import api, h  # noqa: F401 - the uvicorn fixture
from toolq import CallStatus
from toolq.signing import generate_pair

pytestmark = pytest.mark.e2e

SECRET = "sk-live-7f3a9c1e5b2d4f6a8c0e"


def everything_in_redis(r) -> list[bytes]:
    found: list[bytes] = []
    for key in r.scan_iter(count=1000):
        kind = r.type(key).decode()
        found.append(key)
        if kind == "string":
            found.append(r.get(key) or b"")
        elif kind == "hash":
            for field, value in r.hgetall(key).items():
                found += [field, value]
        elif kind == "list":
            found += r.lrange(key, 0, -1)
        elif kind == "set":
            found += list(r.smembers(key))
        elif kind == "zset":
            found += [m for m, _ in r.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            for _, fields in r.xrange(key):
                for field, value in fields.items():
                    found += [field, value]
    return found


def test_secret_arguments_never_leak(api, workers, r, tmp_path: Path):  # noqa: F811
    log = tmp_path / "worker.log"
    workers.start(log=log, loglevel="debug")
    posted = httpx.post(
        f"{api}/v1/runs/sec/calls",
        headers=h("agent-t"),
        json=[
            {"id": "s1", "name": "login", "arguments": {"user": "ann", "password": SECRET}},
        ],
    ).json()
    call_id = posted["calls"][0]["call_id"]
    responses = [
        httpx.get(f"{api}/v1/approvals", headers=h("view-t")).text,
        httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("view-t")).text,
    ]
    approved = approve_shown(api, call_id, h("alice-t"))
    assert approved.status_code == 200
    deadline = time.monotonic() + 20
    while (
        httpx.get(f"{api}/v1/calls/{call_id}", headers=h("view-t")).json()["status"] != "succeeded"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    responses += [
        approved.text,
        httpx.get(f"{api}/v1/calls/{call_id}", headers=h("view-t")).text,
        httpx.get(f"{api}/v1/runs/sec/calls", headers=h("view-t")).text,
        httpx.get(
            f"{api}/v1/runs/sec/events", params={"follow": "false"}, headers=h("view-t")
        ).text,
        httpx.get(f"{api}/v1/runs/sec/messages", headers=h("view-t")).text,
        httpx.get(f"{api}/metrics", headers=h("view-t")).text,
        httpx.get(f"{api}/", headers=h("view-t")).text,
    ]
    assert "ann logged in" in responses[3]
    for text in responses:
        assert SECRET not in text
    assert "**********" in responses[1]
    for blob in everything_in_redis(r):
        assert SECRET.encode() not in blob
    workers.stop_all()
    assert log.read_text(errors="replace").strip()  # the log was written
    assert SECRET not in log.read_text(errors="replace")
    assert r.hget(f"toolq:call:{call_id}", "status") == CallStatus.SUCCEEDED.value.encode()


# -- secrets in calls that never ran or sit in nested models; what encryption at rest adds ---

FINAL = {"succeeded", "failed", "denied", "expired", "cancelled"}


def fp(secret: str) -> str:
    from pydantic import SecretStr

    from tests.apps import fingerprint

    return fingerprint(SecretStr(secret))


def wait_final(api: str, call_ids: list[str], timeout: float = 30) -> dict[str, dict]:  # noqa: F811
    deadline = time.monotonic() + timeout
    while True:
        got = {c: httpx.get(f"{api}/v1/calls/{c}", headers=h("view-t")).json() for c in call_ids}
        if all(g["status"] in FINAL for g in got.values()):
            return got
        assert time.monotonic() < deadline, got
        time.sleep(0.1)


def viewer_sees(api: str, run_id: str, call_ids: list[str]) -> list[str]:  # noqa: F811
    """Every read a viewer token can make of a run and its calls."""
    texts = [
        httpx.get(f"{api}/v1/approvals", headers=h("view-t")).text,
        httpx.get(f"{api}/v1/runs/{run_id}/calls", headers=h("view-t")).text,
        httpx.get(
            f"{api}/v1/runs/{run_id}/events", params={"follow": "false"}, headers=h("view-t")
        ).text,
        httpx.get(f"{api}/v1/runs/{run_id}/messages", headers=h("view-t")).text,
    ]
    for call_id in call_ids:
        texts.append(httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("view-t")).text)
        texts.append(httpx.get(f"{api}/v1/calls/{call_id}", headers=h("view-t")).text)
    return texts


def assert_nowhere(secrets: list[str], texts: list[str], r) -> None:
    for text in texts:
        for secret in secrets:
            assert secret not in text
    for blob in everything_in_redis(r):
        for secret in secrets:
            assert secret.encode() not in blob, blob[:200]


def test_viewer_reads_never_parked_and_failed_calls_masked(api, workers, r, tmp_path):  # noqa: F811
    """No secret through /v1/approvals/{id} of a call that was never parked."""
    log = tmp_path / "worker.log"
    workers.start(log=log, loglevel="debug")
    secrets = [f"sk-finding2-{i}-9c1e5b2d4f6a" for i in range(6)]
    posted = httpx.post(
        f"{api}/v1/runs/f2/calls",
        headers=h("agent-t"),
        json=[
            {
                "id": "ok1",
                "name": "fetch_with_token",
                "arguments": {"url": "u", "token": secrets[0]},
            },
            {
                "id": "ok2",
                "name": "vault_login",
                "arguments": {"creds": {"user": "ann", "password": secrets[1]}},
            },
            # failed validation: top level, nested, wrong shapes, unknown argument
            {"id": "bad1", "name": "login", "arguments": {"user": 5, "password": secrets[2]}},
            {"id": "bad2", "name": "vault_login", "arguments": {"creds": secrets[3]}},
            {"id": "bad3", "name": "vault_login", "arguments": {"creds": {"password": secrets[4]}}},
            {
                "id": "bad4",
                "name": "rotate_keys",
                "arguments": {"service": "s", "keys": [{"name": "a", "value": secrets[5]}]},
            },
        ],
    ).json()
    ids = [c["call_id"] for c in posted["calls"]]
    assert [c["status"] for c in posted["calls"]][2:] == ["failed"] * 4
    final = wait_final(api, ids)
    assert [final[c]["status"] for c in ids[:2]] == ["succeeded", "succeeded"]
    texts = viewer_sees(api, "f2", ids)
    never_parked = httpx.get(f"{api}/v1/approvals/{ids[0]}", headers=h("view-t")).json()
    assert never_parked["arguments"] == {"url": "u", "token": "**********"}
    nested = httpx.get(f"{api}/v1/approvals/{ids[1]}", headers=h("view-t")).json()
    assert nested["arguments"] == {"creds": {"user": "ann", "password": "**********"}}
    shapes = httpx.get(f"{api}/v1/approvals/{ids[3]}", headers=h("view-t")).json()
    assert shapes["arguments"] == {"creds": "**********"}
    assert_nowhere(secrets, texts, r)
    # the handlers got the real values (they record a hash of what they received)
    assert r.lrange(f"test:exec:{ids[0]}", 0, -1)[0].decode().endswith(f"fetch:{fp(secrets[0])}")
    assert r.lrange(f"test:exec:{ids[1]}", 0, -1)[0].decode().endswith(f"vault:{fp(secrets[1])}")
    for failed in ids[2:]:
        assert not r.exists(f"test:exec:{failed}")
    workers.stop_all()
    text = log.read_text(errors="replace")
    assert text.strip()
    for secret in secrets:
        assert secret not in text


def test_secrets_nested_in_models_lists_and_dicts(api, inproc, r):  # noqa: F811
    """Secrets nested in models, lists and dicts, and approve-with-edit: a masked secret kept
    as is runs with the original."""
    inproc.start()
    one, two, auth, new = (f"sk-finding3-{n}-5b2d4f6a8c" for n in ("one", "two", "auth", "new"))
    posted = httpx.post(
        f"{api}/v1/runs/f3/calls",
        headers=h("agent-t"),
        json=[
            {
                "id": "rk",
                "name": "rotate_keys",
                "arguments": {
                    "service": "billing",
                    "keys": [{"name": "a", "value": one}, {"name": "b", "value": two}],
                    "headers": {"Authorization": auth},
                },
            }
        ],
    ).json()
    [call_id] = [c["call_id"] for c in posted["calls"]]
    assert posted["calls"][0]["status"] == "awaiting_approval"
    listed = httpx.get(f"{api}/v1/approvals", headers=h("view-t")).json()
    shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("view-t")).json()
    assert [p["arguments"] for p in listed] == [shown["arguments"]]
    assert shown["arguments"] == {
        "service": "billing",
        "keys": [{"name": "a", "value": "**********"}, {"name": "b", "value": "**********"}],
        "headers": {"Authorization": "**********"},
    }
    texts = viewer_sees(api, "f3", [call_id])
    assert_nowhere([one, two, auth], texts, r)
    # The approver edits what it sees: keeps the masked key a and header, replaces key b.
    edited = shown["arguments"]
    edited["service"] = "billing-eu"
    edited["keys"][1]["value"] = new
    approved = httpx.post(
        f"{api}/v1/approvals/{call_id}/approve",
        headers=h("alice-t"),
        json={"arguments": edited, "digest": shown["digest"]},
    )
    assert approved.status_code == 200, approved.text
    assert wait_final(api, [call_id])[call_id]["status"] == "succeeded"
    [ran] = r.lrange(f"test:exec:{call_id}", 0, -1)
    assert ran.decode().split(":", 1)[1] == (
        f"rotate:a={fp(one)},b={fp(new)},Authorization={fp(auth)}"
    )
    after = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("view-t")).json()
    assert after["arguments"]["keys"][1]["value"] == "**********"
    assert after["original_arguments"]["keys"][1]["value"] == "**********"
    events = httpx.get(
        f"{api}/v1/runs/f3/events", params={"follow": "false"}, headers=h("view-t")
    ).json()
    [decided] = [e for e in events if e["type"] == "call.approved"]
    assert decided["data"]["edited_arguments"]["service"] == "billing-eu"
    assert decided["data"]["edited_arguments"]["keys"][1]["value"] == "**********"
    assert_nowhere([one, two, auth, new], [approved.text, *viewer_sees(api, "f3", [call_id])], r)


def test_without_a_secrets_key_secrets_are_refused_not_stored(inproc, r):
    """No TOOLQ_SECRETS_KEY: a dispatcher fails the call; a worker refuses to run it."""
    from tests.apps import registry
    from tests.conftest import make_settings
    from toolq import Client

    secret = "sk-nokey-0e7f3a9c1e5b"
    inproc.start()
    with Client(registry, make_settings(secrets_key=None)) as keyless:
        batch = keyless.dispatch(
            [
                {"id": "s", "name": "fetch_with_token", "arguments": {"url": "u", "token": secret}},
                {"id": "e", "name": "echo", "arguments": {"text": "no secret here"}},
                {"id": "n", "name": "login", "arguments": {"user": "u", "password": secret}},
            ]
        )
        refused, fine, parked = batch.wait(timeout=20)
    assert refused.status is CallStatus.FAILED and refused.error_type == "secrets_key_missing"
    assert "TOOLQ_SECRETS_KEY" in (refused.error or "")
    assert fine.status is CallStatus.SUCCEEDED
    assert parked.error_type == "secrets_key_missing"  # failed, never parked
    assert not r.exists(f"test:exec:{refused.call_id}")
    assert_nowhere([secret], [], r)


def test_a_worker_without_the_key_runs_nothing(client, inproc, r):
    inproc.start(secrets_key=None)
    batch = client.dispatch(
        [{"id": "s", "name": "fetch_with_token", "arguments": {"url": "u", "token": "sk-x-1"}}]
    )
    [result] = batch.wait(timeout=20)
    assert result.status is CallStatus.FAILED and result.error_type == "secrets_key_missing"
    assert not r.exists(f"test:exec:{result.call_id}")


def test_a_sealed_secret_moved_by_a_redis_writer_does_not_decrypt(client, inproc, r):
    """Ciphertexts are bound to their call, tool and path; plaintext in a record is refused."""
    import json

    secret = "sk-victim-4f6a8c0e7f3a"
    victim = client.dispatch(
        [{"id": "v", "name": "fetch_with_token", "arguments": {"url": "ok", "token": secret}}],
        run_id="victim",
    )
    thief = client.dispatch(
        [
            {"id": "t", "name": "fetch_with_token", "arguments": {"url": "evil", "token": "x"}},
            {"id": "p", "name": "fetch_with_token", "arguments": {"url": "evil", "token": "y"}},
        ],
        run_id="thief",
    )
    stolen = json.loads(r.hget(f"toolq:call:{victim.call_ids[0]}", "envelope"))
    assert set(stolen["arguments"]["token"]) == {"$toolq_secret"}
    tokens = [stolen["arguments"]["token"], "plain-pw"]
    for call_id, token in zip(thief.call_ids, tokens, strict=True):
        envelope = json.loads(r.hget(f"toolq:call:{call_id}", "envelope"))
        envelope["arguments"]["token"] = token
        r.hset(f"toolq:call:{call_id}", "envelope", json.dumps(envelope))
    inproc.start()
    [ok] = victim.wait(timeout=20)
    moved, plain = thief.wait(timeout=20)
    assert ok.status is CallStatus.SUCCEEDED
    assert r.lrange(f"test:exec:{ok.call_id}", 0, -1)[0].decode().endswith(f"fetch:{fp(secret)}")
    assert moved.status is CallStatus.FAILED and moved.error_type == "secrets_error"
    assert "cannot be decrypted" in (moved.error or "")
    assert plain.status is CallStatus.FAILED and "stored unencrypted" in (plain.error or "")
    assert not r.exists(f"test:exec:{moved.call_id}") and not r.exists(f"test:exec:{plain.call_id}")


# Seven CLI processes (16 s alone): a CI pair on two loaded cores took it past 120 s.
@pytest.mark.timeout(300)
def test_cli_list_show_tail_and_approve_with_edit_keep_secrets_masked(settings, inproc, r):
    import json

    from tests.conftest import SECRETS_KEY

    inproc.start()
    key, auth = "sk-cli-key-8c0e7f3a9c", "sk-cli-auth-1e5b2d4f6a"
    env = {"TOOLQ_SECRETS_KEY": SECRETS_KEY, "TOOLQ_APP": "tests.apps:registry"}
    payload = json.dumps(
        [
            {
                "id": "k",
                "name": "rotate_keys",
                "arguments": {
                    "service": "s",
                    "keys": [{"name": "a", "value": key}],
                    "headers": {"Authorization": auth},
                },
            }
        ]
    )
    done = toolq("dispatch", "--run-id", "cli-sec", settings=settings, stdin=payload, **env)
    assert done.returncode == 0, done.stderr
    call_id = json.loads(done.stdout)["calls"][0]["call_id"]
    listed = toolq("approvals", "list", settings=settings, **env)
    shown = toolq("approvals", "show", call_id, settings=settings, **env)
    assert call_id in listed.stdout and "**********" in shown.stdout
    # the digest of the call as shown (its arguments as stored: secrets sealed)
    digest = json.loads(
        toolq("approvals", "show", call_id, "--json", settings=settings, **env).stdout
    )["digest"]
    edited = {
        "service": "s2",
        "keys": [{"name": "a", "value": "**********"}],
        "headers": {"Authorization": "**********"},
    }
    approved = toolq(
        "approvals",
        "approve",
        call_id,
        "--by",
        "ops",
        "--args",
        json.dumps(edited),
        "--digest",
        digest,
        settings=settings,
        TOOLQ_APPROVAL_SIGNING_KEY=generate_pair()[0],
        **env,
    )
    assert approved.returncode == 0, approved.stderr
    waited = toolq(
        "dispatch", "--run-id", "cli-sec", "--wait", "20", settings=settings, stdin=payload, **env
    )
    assert '"succeeded"' in waited.stdout, waited.stdout
    tail = toolq("tail", "cli-sec", "--json", settings=settings, **env)
    assert "call.succeeded" in tail.stdout
    [ran] = r.lrange(f"test:exec:{call_id}", 0, -1)
    assert ran.decode().endswith(f"rotate:a={fp(key)},Authorization={fp(auth)}")
    outputs = [done, listed, shown, approved, waited, tail]
    assert_nowhere([key, auth], [o.stdout + o.stderr for o in outputs], r)
