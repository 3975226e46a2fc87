"""Hostile signature headers on Slack's interactivity URL: a 401, never a 500.

The same bug class as the API's bearer tokens (``secrets.compare_digest`` on ``str`` with
non-ASCII characters raises ``TypeError``): a header value reaches the app as latin-1 text,
so anyone who can reach the URL, without the signing secret, could make it answer 500.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.conftest import make_settings, serve, settings_with_env
from tests.slack.conftest import SIGNING_SECRET, slack_signature
from toolq.api.app import create_app


@pytest.fixture
def api(r: redis.Redis) -> Iterator[str]:
    from tests.apps import registry

    env = {"TOOLQ_SLACK_SIGNING_SECRET": SIGNING_SECRET, "TOOLQ_SLACK_BOT_TOKEN": "xoxb-x"}
    settings = settings_with_env(make_settings(), env)
    yield from serve(create_app(settings, registry, tokens={}))


BODY = b"payload=%7B%7D"


@pytest.mark.parametrize(
    ("stamp", "signature"),
    [
        # a non-ASCII signature with a fresh timestamp: compare_digest(str, str) raises
        (None, "v0=\u00e9" + "0" * 63),
        (None, b"v0=\xff\xfe"),
        # a latin-1 superscript digit: str.isdigit() says yes, int() says no
        ("\u00b2", None),
        ("17\u00b900000", None),
    ],
)
def test_a_non_ascii_slack_signature_or_timestamp_is_a_401_not_a_500(api, stamp, signature):
    fresh = str(int(time.time()))
    stamp = fresh if stamp is None else stamp
    if signature is None:
        signature = slack_signature(SIGNING_SECRET, fresh, BODY)
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": stamp.encode("latin-1"),
        "X-Slack-Signature": signature.encode("latin-1")
        if isinstance(signature, str)
        else signature,
    }
    got = httpx.post(f"{api}/v1/slack/interactions", content=BODY, headers=headers)
    assert got.status_code == 401, got.text
    assert got.json()["error"]["code"] == "unauthenticated"
