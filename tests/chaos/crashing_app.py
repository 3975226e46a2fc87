"""``tests.apps`` with Celery's consumer made to die on a broker connection loss.

For the test that ``toolq worker`` exits non-zero with a one-line reason when the consumer
dies anyway: the connection-error handler raises, as kombu's ``_connparams`` did before
toolq's patch (``toolq.broker.patch_kombu``).
"""

from __future__ import annotations

from typing import Any

from celery.worker.consumer.consumer import Consumer

from tests.apps import registry

__all__ = ["registry"]


def _die(self: Any, exc: BaseException) -> None:
    raise RuntimeError(f"injected: consumer died on {type(exc).__name__}")


Consumer.on_connection_error_after_connected = _die  # type: ignore[method-assign]
