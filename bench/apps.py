"""Apps the benchmark workers load.

``registry``: a toolq registry with one no-op tool (``toolq worker --app bench.apps:registry``).
``raw_celery``: a minimal plain Celery app with a no-op task, configured like toolq's
(JSON only, late acks) plus a Redis result backend; its broker/backend URL comes from
``BENCH_REDIS_URL`` (``celery -A bench.apps:raw_celery worker``).
"""

from __future__ import annotations

import os

from celery import Celery

from toolq import ToolRegistry

RAW_QUEUE = "bench.raw"
RAW_TASK = "bench.raw.noop"

registry = ToolRegistry()


@registry.tool()
def noop() -> None:
    """Do nothing."""


def make_raw_celery(redis_url: str) -> Celery:
    """A plain Celery app on ``redis_url`` (broker and result backend)."""
    app = Celery("bench_raw", broker=redis_url, backend=redis_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        event_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_default_queue=RAW_QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )

    @app.task(name=RAW_TASK)  # type: ignore[untyped-decorator]
    def noop() -> None:
        return None

    return app


_raw: Celery | None = None


def __getattr__(name: str) -> Celery:
    """``raw_celery`` is built on first use, so importing ``registry`` builds no Celery app."""
    global _raw
    if name == "raw_celery":
        if _raw is None:
            _raw = make_raw_celery(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14"))
        return _raw
    raise AttributeError(name)
