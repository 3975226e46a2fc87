"""``create_celery(settings, registry)``: the Celery app, its one task, and the publisher."""

from __future__ import annotations

import base64
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from celery import Celery, bootsteps
from kombu import serialization
from kombu.entity import Exchange, Queue
from kombu.transport import redis as kombu_redis
from kombu.utils.json import dumps as kombu_dumps
from redis import exceptions as redis_errors

from toolq.keys import PREVIEW_TASK_NAME, TASK_NAME, UNDO_TASK_NAME, Keys
from toolq.models import RiskLevel
from toolq.registry.registry import ToolRegistry
from toolq.results.connection import RedisTarget
from toolq.settings import Settings

HARD_LIMIT_GRACE = 10.0
"""Seconds past a tool's own time limit before Celery kills the worker process."""


def _connparams_unless_closed(self: Any, asynchronous: bool = False) -> Any:
    """Connection parameters as kombu's Redis ``Channel._connparams``; once closed, an error.

    After a broker connection loss Celery's consumer closes the connection (``collect``
    then ``close``) while the channel still has work: restoring its unacknowledged
    messages, or acknowledging a task that finished meanwhile (threads pool). Both need
    a new Redis client, and with the transport already closed kombu reads ``hostname``
    or ``client`` of ``None``: an ``AttributeError``, which Celery treats as
    unrecoverable, and the worker exits. A connection error is what it is: Celery then
    reconnects as for any other, and the messages stay in kombu's ``unacked`` hash,
    where kombu's visibility timeout and toolq's sweeper (``resend_stranded``) find them.
    """
    transport = self.connection
    if transport is None or transport.client is None:
        raise redis_errors.ConnectionError("kombu channel used after its connection closed")
    return _KOMBU_CONNPARAMS(self, asynchronous=asynchronous)


_KOMBU_CONNPARAMS = kombu_redis.Channel._connparams


def patch_kombu() -> None:
    """Install ``_connparams_unless_closed`` once (see celery/kombu#970 and #582)."""
    if kombu_redis.Channel._connparams is not _connparams_unless_closed:
        kombu_redis.Channel._connparams = _connparams_unless_closed


class Publisher:
    """Sends call ids to the queue of their risk level."""

    def __init__(self, app: Celery, settings: Settings) -> None:
        self.app = app
        self.keys = Keys(settings.key_prefix)

    def send_many(self, calls: Sequence[tuple[str, RiskLevel, float | None, str | None]]) -> None:
        """Publish ``(call_id, risk, timeout, run_id)`` over one producer connection.

        The run id rides along so the worker needs no lookup before it starts the call;
        the worker checks it against the record.
        """
        with self.app.producer_or_acquire() as producer:
            for call_id, risk, timeout, run_id in calls:
                options: dict[str, Any] = {}
                if timeout is not None:
                    options["time_limit"] = timeout + HARD_LIMIT_GRACE
                self.app.send_task(
                    TASK_NAME,
                    args=[call_id, run_id] if run_id else [call_id],
                    queue=self.keys.queue_for(risk),
                    producer=producer,
                    ignore_result=True,
                    **options,
                )

    def message(
        self, call_id: str, risk: RiskLevel, timeout: float | None, run_id: str
    ) -> tuple[str, str]:
        """The queue and the message kombu's Redis transport would push for this call.

        Dispatch pushes it in the same script that creates the call, so a queued call and
        its message appear together (one round trip, and nothing to re-send if the client
        dies in between). The task message is Celery's own (``create_task_message``); only
        the transport envelope is built here, as kombu's virtual channel does it for the
        default exchange: JSON body, base64 body encoding, persistent delivery.
        """
        queue = self.keys.queue_for(risk)
        options: dict[str, Any] = {}
        if timeout is not None:
            options["time_limit"] = timeout + HARD_LIMIT_GRACE
        return queue, self._envelope(queue, TASK_NAME, [call_id, run_id], options)

    def undo_message(self, call_id: str, risk: RiskLevel) -> tuple[str, str]:
        """The queue and message of a call's undo, pushed by the script that requests it."""
        queue = self.keys.queue_for(risk)
        return queue, self._envelope(queue, UNDO_TASK_NAME, [call_id], {})

    def _envelope(self, queue: str, task_name: str, args: list[str], options: Any) -> str:
        """Celery's task message in kombu's Redis transport envelope (see ``message``)."""
        task = self.app.amqp.create_task_message(
            str(uuid.uuid4()),
            task_name,
            args,
            {},
            reply_to=self.app.thread_oid,
            ignore_result=True,
            **options,
        )
        content_type, encoding, body = serialization.dumps(task.body, serializer="json")
        raw = body.encode(encoding) if isinstance(body, str) else body
        properties = {
            **task.properties,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        }
        envelope = {
            "body": base64.b64encode(raw).decode("ascii"),
            "content-encoding": encoding,
            "content-type": content_type,
            "headers": task.headers,
            "properties": properties,
        }
        return str(kombu_dumps(envelope))

    def send(
        self,
        call_id: str,
        risk: RiskLevel,
        timeout: float | None = None,
        run_id: str | None = None,
    ) -> None:
        """Publish one call."""
        self.send_many([(call_id, risk, timeout, run_id)])

    def send_preview(self, call_id: str, risk: RiskLevel) -> None:
        """Ask a worker of the call's risk level to compute its preview."""
        self.app.send_task(
            PREVIEW_TASK_NAME, args=[call_id], queue=self.keys.queue_for(risk), ignore_result=True
        )


class _PerProcess:
    """One ``WorkerRuntime`` per process, made lazily after a prefork child is forked."""

    def __init__(self, settings: Settings, registry: ToolRegistry, app: Celery) -> None:
        self.settings = settings
        self.registry = registry
        self.app = app
        self._runtime: Any = None
        self._pid = 0
        self._lock = threading.Lock()

    def get(self) -> Any:
        """The runtime of the current process."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    from toolq.workers.runtime import WorkerRuntime

                    self._runtime = WorkerRuntime(self.settings, self.registry)
                    self._pid = os.getpid()
        return self._runtime


def pool_name(pool: Any) -> str:
    """``prefork``, ``threads`` or ``solo``: the ``--pool`` name of a Celery pool instance.

    Every Celery pool class is called ``TaskPool``; its module tells them apart.
    """
    module = type(pool).__module__.rsplit(".", 1)[-1]
    return {"thread": "threads"}.get(module, module)


class MaintenanceStep(bootsteps.StartStopStep):
    """Runs heartbeat, recovery and sweeping in the worker's main process."""

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.maintenance: Any = None

    def start(self, worker: Any) -> None:
        """Start the maintenance thread."""
        from toolq.workers.maintenance import Maintenance

        app = worker.app
        queues = sorted(app.amqp.queues.consume_from or app.amqp.queues)
        self.maintenance = Maintenance(
            app.toolq_settings,
            app.toolq_registry,
            Publisher(app, app.toolq_settings),
            hostname=worker.hostname,
            queues=queues,
            pool=pool_name(worker.pool),
            concurrency=worker.concurrency,
        )
        self.maintenance.start()
        if not app.toolq_settings.approval_verify_keys:
            logging.getLogger("toolq.worker").warning(
                "worker %s has no TOOLQ_APPROVAL_VERIFY_KEYS: it runs gated calls without "
                "verifying their signed approvals (anyone who can write to Redis can run them)",
                worker.hostname,
            )

    def stop(self, worker: Any) -> None:
        """Stop the maintenance thread."""
        if self.maintenance is not None:
            self.maintenance.stop()


def create_celery(settings: Settings, registry: ToolRegistry) -> Celery:
    """A Celery app for ``registry``: JSON only, late acks, one queue per risk level.

    Library code never imports a global app: every process builds its own from settings.
    With ``TOOLQ_SENTINELS`` the broker is kombu's Sentinel transport, following the same
    master as toolq's own clients (dispatch pushes the messages workers read).
    """
    keys = Keys(settings.key_prefix)
    patch_kombu()
    target = RedisTarget.of(settings)
    app = Celery("toolq", broker=target.broker_url(), set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        event_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_queues=[
            Queue(name, Exchange(name, type="direct"), routing_key=name)
            for name in (keys.queue_for(level) for level in RiskLevel)
        ],
        task_default_queue=keys.queue_for(RiskLevel.SAFE),
        task_create_missing_queues=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            # Above the longest hard limit, so a running call is never redelivered early;
            # toolq's own lease recovers dead workers' calls long before this.
            "visibility_timeout": int(settings.max_time_limit + HARD_LIMIT_GRACE + 60),
            **target.broker_transport_options(),
        },
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        worker_enable_remote_control=True,
    )
    app.toolq_settings = settings
    app.toolq_registry = registry
    holder = _PerProcess(settings, registry, app)

    @app.task(
        name=TASK_NAME, ignore_result=True, acks_late=True, reject_on_worker_lost=True, shared=False
    )
    def execute(call_id: str, run_id: str | None = None) -> None:
        holder.get().run(str(call_id), run_id if isinstance(run_id, str) else None)

    @app.task(name=PREVIEW_TASK_NAME, ignore_result=True, acks_late=True, shared=False)
    def preview(call_id: str) -> None:
        holder.get().preview(call_id)

    @app.task(name=UNDO_TASK_NAME, ignore_result=True, acks_late=True, shared=False)
    def undo(call_id: str) -> None:
        holder.get().undo(call_id)

    app.steps["worker"].add(MaintenanceStep)
    return app
