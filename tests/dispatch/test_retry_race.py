"""Two retries of one call by two principals: the tool runs once for them, not twice.

The run's owner and an admin dispatch in two idempotency scopes, so both retries used to
be dispatched; the one that lost the link was withdrawn, but only if it had not started
yet. Here the loser's call is made to start before its retry links (the admin's retry runs
inside the owner's dispatch, and the owner's returns once its call ran), as a fast worker
does in the gap.
"""

from __future__ import annotations

import pytest

from tests.apps import _redis
from toolq import CallStatus, Client, ToolRegistry
from toolq.errors import NotRetryableError

RUNS = "test:retry-race:runs"

registry = ToolRegistry()


@registry.tool()
def send_invoice(to: str) -> str:
    """Not idempotent: every run sends one (the first one fails)."""
    if _redis().rpush(RUNS, to) == 1:
        raise RuntimeError("mail server down")
    return f"sent to {to}"


def test_an_admins_retry_during_the_owners_is_refused_and_the_tool_runs_once(
    r, settings, inproc, wait_for
) -> None:
    inproc.start("safe", app="tests.dispatch.test_retry_race:registry")
    with Client(registry, settings) as client:
        [failed] = client.dispatch(
            [{"id": "t1", "name": "send_invoice", "arguments": {"to": "acme"}}],
            run_id="r-race",
            principal="agent",
        ).wait(timeout=30)
        assert failed.status is CallStatus.FAILED
        real = client.dispatcher.dispatch
        refused: list[NotRetryableError] = []

        def owner_dispatch(*args, **kwargs):  # type: ignore[no-untyped-def]
            client.dispatcher.dispatch = real  # type: ignore[method-assign]
            try:  # the admin's retry, while the owner's is being dispatched
                client.retry(failed.call_id, principal="ops", admin=True)
            except NotRetryableError as exc:
                refused.append(exc)
            dispatched = real(*args, **kwargs)
            new_id = dispatched.calls[0].call_id
            wait_for(lambda: client.result(new_id).status.is_final, 30, "the retry did not run")
            return dispatched

        client.dispatcher.dispatch = owner_dispatch  # type: ignore[method-assign]
        try:
            retried = client.retry(failed.call_id, principal="agent")
        except NotRetryableError as exc:  # the admin's linked first (the loser ran anyway)
            pytest.fail(f"{exc.message}; sent {r.lrange(RUNS, 0, -1)}")
        finally:
            client.dispatcher.dispatch = real  # type: ignore[method-assign]
        assert r.lrange(RUNS, 0, -1) == [b"acme", b"acme"]  # the failed run and one retry
        assert retried.status is CallStatus.SUCCEEDED and retried.retry_of == failed.call_id
        [exc] = refused
        assert "being retried by another principal" in exc.message
        # Once linked, anyone's retry is refused with the call that retried it.
        with pytest.raises(NotRetryableError, match=f"retried already, by call {retried.call_id}"):
            client.retry(failed.call_id, principal="ops", admin=True)
        # The owner asking again (a lost reply) is not refused by its own claim.
        with pytest.raises(NotRetryableError, match="retried already"):
            client.retry(failed.call_id, principal="agent")
