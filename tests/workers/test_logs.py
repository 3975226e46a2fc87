"""kombu's ``Couldn't ack`` over a lost or hung broker connection: one warning line."""

from __future__ import annotations

import logging

import pytest
import redis

from toolq.workers.logs import AckAfterReconnect


def _ack_failure(error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except BaseException as exc:  # kombu logs it from its except block, with the traceback
        record = logging.LogRecord(
            "celery.worker.request", logging.CRITICAL, __file__, 1,
            "Couldn't ack %r, reason:%r", ("tag-1", exc), exc_info=(type(exc), exc, None),
        )  # fmt: skip
    return record


@pytest.mark.parametrize(
    "error",
    [redis.ConnectionError("Connection closed by server."), redis.TimeoutError("Timeout")],
    ids=["lost", "hung"],
)
def test_an_ack_over_a_lost_or_hung_connection_is_one_warning_line(error: Exception) -> None:
    record = _ack_failure(error)
    assert AckAfterReconnect().filter(record)
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "not acknowledged" in record.getMessage()


def test_another_ack_failure_is_left_as_kombu_logged_it() -> None:
    record = _ack_failure(ValueError("something else"))
    assert AckAfterReconnect().filter(record)
    assert record.levelno == logging.CRITICAL and record.exc_info is not None
