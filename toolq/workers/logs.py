"""One log line per real event on a worker: no tracebacks for a broker reconnect.

When Redis restarts (or hangs past the socket timeout), calls that finish while the
consumer reconnects cannot be acknowledged on the closed channel; kombu logs each as
``CRITICAL Couldn't ack`` with a traceback, although nothing is wrong: the call's outcome
is in Redis, and its message, left in kombu's ``unacked`` hash, is skipped if it is ever
delivered again (the call is no longer ``queued``). Celery also warns on every reconnect
about a default it will change in 6.0 (``worker_cancel_long_running_tasks_on_connection_loss``);
toolq keeps running calls through a reconnect on purpose (they hold a lease in Redis), so
the warning says nothing.
"""

from __future__ import annotations

import logging
import warnings

import redis
from kombu.exceptions import OperationalError

ACK_LOGGER = "celery.worker.request"
"""The logger Celery passes to kombu's ``Message.ack_log_error``."""


class AckAfterReconnect(logging.Filter):
    """Turns kombu's ``Couldn't ack`` over a lost connection into one warning line."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record when it is such an ack failure; keep every record."""
        if not str(record.msg).startswith("Couldn't ack") or not record.args:
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        error = args[-1] if args else None
        lost = (redis.ConnectionError, redis.TimeoutError, ConnectionError, OperationalError)
        if not isinstance(error, lost):
            return True
        record.msg = (
            "message %s not acknowledged: the broker connection was lost (%s); its call's "
            "outcome is saved, and a re-delivery of the message is skipped"
        )
        record.args = (args[0], error)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info, record.exc_text = None, None
        return True


def quiet_expected_reconnects() -> None:
    """Install ``AckAfterReconnect`` and silence Celery's reconnect deprecation notice."""
    logger = logging.getLogger(ACK_LOGGER)
    if not any(isinstance(f, AckAfterReconnect) for f in logger.filters):
        logger.addFilter(AckAfterReconnect())
    warnings.filterwarnings(
        "ignore", message=r"\s*In Celery 5\.1 we introduced an optional breaking change"
    )
