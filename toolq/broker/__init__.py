"""The broker wire: the one place that knows Celery's and kombu's message format.

- ``app``: ``celery_app(settings)``, the Celery app every toolq process talks to the broker
  with (JSON only, one queue per risk level, kombu's Redis transport options), and
  ``patch_kombu``;
- ``messages``: task names, ``Publisher`` (the encoder: the exact envelope kombu's Redis
  transport pushes) and ``decode`` (its inverse, for the sweeper and in-process workers);
- ``unacked``: kombu's bookkeeping of taken, unacknowledged messages, read by the sweeper;
- ``acks``: acknowledgements a worker sends behind a message's last FINISH, which kombu's
  acknowledgement then skips.

The format is kombu's and Celery's, not a public one: ``pyproject.toml`` bounds both, and
``tests/broker/test_wire.py`` compares what ``Publisher`` writes with what kombu publishes.
Queue names are keys like any other (``Keys.queue_for``).
"""

from toolq.broker.app import HARD_LIMIT_GRACE, celery_app, patch_kombu
from toolq.broker.messages import (
    BATCH_TASK_NAME,
    PREVIEW_TASK_NAME,
    TASK_NAME,
    UNDO_TASK_NAME,
    Delivery,
    Publisher,
    decode,
)

__all__ = [
    "BATCH_TASK_NAME",
    "HARD_LIMIT_GRACE",
    "PREVIEW_TASK_NAME",
    "TASK_NAME",
    "UNDO_TASK_NAME",
    "Delivery",
    "Publisher",
    "celery_app",
    "decode",
    "patch_kombu",
]
