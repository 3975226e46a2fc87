"""A call id prefix still names one call after the call was retried.

``POST /v1/calls/{id}/retry`` (and ``toolq calls retry``) claims the retry for 60 s in
``toolq:call:<id>:retrying``. In a drill, ``toolq calls retry 4f642351`` run a second time
(and ``toolq calls show 4f642351``) answered ``error: call id prefix '4f642351' matches 2
calls (4f64…, 4f64…:retrying); type more of it``: the claim key is counted as a call, so
every prefix of a just-retried call is "ambiguous" for a minute and the on-call person
never sees "retried already, by call …".
"""

from __future__ import annotations

import pytest

from tests.cli.test_cli import toolq
from toolq import CallStatus

pytestmark = pytest.mark.e2e

APP = ("--app", "tests.apps:registry")


def test_prefix_of_a_retried_call_is_not_ambiguous(settings, inproc, client):
    inproc.start()
    batch = client.dispatch([{"id": "b1", "name": "boom", "arguments": {}}], run_id="prefix-run")
    (result,) = batch.wait(20)
    assert result.status is CallStatus.FAILED
    call_id = batch.call_ids[0]
    first = toolq("calls", "retry", call_id[:8], *APP, settings=settings)
    assert first.returncode == 0, first.stderr

    shown = toolq("calls", "show", call_id[:8], settings=settings)
    assert "matches 2 calls" not in shown.stderr, shown.stderr
    assert shown.returncode == 0, shown.stderr

    again = toolq("calls", "retry", call_id[:8], *APP, settings=settings)
    assert again.returncode == 1
    assert "retried already" in again.stderr, again.stderr
