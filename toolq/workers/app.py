"""``create_celery(settings, registry)``: the broker's Celery app with toolq's tasks and steps."""

from __future__ import annotations

# Imported before any thread starts, on purpose: a prefork pool child forked while another
# thread of the main process (the maintenance thread connecting to Redis) was importing the
# idna codec for getaddrinfo inherits that module's import lock held, and hangs on its first
# connection (seen: 1 in 25 `--concurrency 1` workers never started a call).
import encodings.idna  # noqa: F401
import logging
import os
import threading
from typing import Any

from celery import Celery, bootsteps, signals
from celery.worker.request import Request

from toolq.broker import (
    BATCH_TASK_NAME,
    HARD_LIMIT_GRACE,
    PREVIEW_TASK_NAME,
    TASK_NAME,
    UNDO_TASK_NAME,
    acks,
    celery_app,
)
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.registry.registry import ToolRegistry
from toolq.settings import Settings
from toolq.workers.heartbeat import count_received
from toolq.workers.pool import patch_result_handler
from toolq.workers.slots import ProcessSiblings, Route, Siblings


class _PerProcess:
    """One ``WorkerRuntime`` per process, made lazily after a prefork child is forked."""

    def __init__(
        self, settings: Settings, registry: ToolRegistry, app: Celery, async_slots: int | None
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.app = app
        self.async_slots = async_slots
        self.acks_here = False
        """Whether the process that runs a task removes its message's entry (``AcksHere``)."""
        self.parent_acks = False
        """Whether a parent acknowledges the messages (prefork): a task tells it ``carried``."""
        self.siblings: Siblings | None = None
        """The worker's slots, which run a message now (``SlotsOfTheWorker``)."""
        self._runtime: Any = None
        self._pid = 0
        self._lock = threading.Lock()

    def ack_of(self, request: Any) -> str | None:
        """The delivery tag of a task's message, if its ``unacked`` entry may go with its FINISH.

        ``toolq.broker.acks``: where this process acknowledges the message itself, or tells
        the parent that does (``carried``).
        """
        if not self.acks_here:
            return None
        tag = (getattr(request, "properties", None) or {}).get("delivery_tag")
        return tag if isinstance(tag, str) and tag else None

    def carried(self, tag: str | None) -> bool | None:
        """A prefork child's task's return value: whether ``tag``'s entry went with its FINISH.

        The child's own mark goes (it never acknowledges); the parent marks the tag instead
        (``CarriedAck``). ``None`` where no parent acknowledges.
        """
        if not self.parent_acks:
            return None
        return tag is not None and acks.take(tag)

    def get(self) -> Any:
        """The runtime of the current process."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    from toolq.workers.runtime import WorkerRuntime

                    self._runtime = WorkerRuntime(
                        self.settings,
                        self.registry,
                        async_slots=self.async_slots,
                        siblings=self.siblings,
                    )
                    self._pid = os.getpid()
        return self._runtime

    def close(self) -> None:
        """Close this process's runtime, if it made one (see ``WorkerRuntime.close``)."""
        with self._lock:
            if self._runtime is not None and self._pid == os.getpid():
                self._runtime.close()
            self._runtime = None
            self._pid = 0


def pool_name(pool: Any) -> str:
    """``prefork``, ``threads`` or ``solo``: the ``--pool`` name of a Celery pool instance.

    Every Celery pool class is called ``TaskPool``; its module tells them apart.
    """
    module = type(pool).__module__.rsplit(".", 1)[-1]
    return {"thread": "threads"}.get(module, module)


class CarriedAck(Request):
    """A task's request in the consumer: its task may have removed its message's entry.

    A prefork child's task returns ``True`` when its last FINISH's round trip removed the
    entry (``toolq.broker.acks``); the tag is then marked ``sent`` here, and the parent's
    acknowledgement only updates kombu's memory instead of a round trip of its own
    (``MULTI ZREM HDEL EXEC``). Celery makes each task's request class a subclass of this
    one with an ``on_success`` of its own (``create_request_cls``): that is what is wrapped.
    Should a Celery release stop doing so, the parent acknowledges with its own round trip
    again, which then removes nothing: slower, never wrong.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        on_success = cls.on_success

        def on_success_carried(self: Any, failed__retval__runtime: Any, **kw: Any) -> Any:
            failed, retval, _ = failed__retval__runtime
            tag = getattr(self.message, "delivery_tag", None)
            if not failed and tag and acks.carried(retval):
                acks.sent(tag)
            return on_success(self, failed__retval__runtime, **kw)

        cls.on_success = on_success_carried


class AcksHere(bootsteps.Step):
    """Tells the tasks whether they remove their messages' entries ahead of the ack.

    Every pool does: the threads and solo pools acknowledge in the process that runs the
    task; a prefork child tells its parent, which acknowledges (``CarriedAck``). Set before
    the pool forks its children, which inherit it.
    """

    requires = ("celery.worker.components:Pool",)

    def create(self, worker: Any) -> None:
        """Set the app's per-process runtimes' ``acks_here``/``parent_acks`` from the pool."""
        runtimes = worker.app.toolq_runtimes
        runtimes.acks_here = pool_name(worker.pool) in ("threads", "solo", "prefork")
        runtimes.parent_acks = pool_name(worker.pool) == "prefork"


class SlotsOfTheWorker(bootsteps.Step):
    """Gives the runtimes the worker's slots, so a busy one hands waiting calls to idle ones.

    A prefork worker's processes share flags in memory, made here before the pool forks
    them; a threads worker's threads share a count. A solo worker has one slot: none.
    """

    requires = ("celery.worker.components:Pool",)

    def create(self, worker: Any) -> None:
        """Set the app's per-process runtimes' ``siblings`` from the pool."""
        runtimes, pool = worker.app.toolq_runtimes, pool_name(worker.pool)
        if worker.concurrency > 1 and pool in ("prefork", "threads"):
            make = ProcessSiblings if pool == "prefork" else Siblings
            runtimes.siblings = make(worker.concurrency)


class ResultPipesOnce(bootsteps.Step):
    """Installs ``patch_result_handler`` in a prefork worker, before its pool meets the loop."""

    requires = ("celery.worker.components:Pool",)

    def create(self, worker: Any) -> None:
        """Patch Celery's result handler when the pool is prefork (the others have none)."""
        if pool_name(worker.pool) == "prefork":
            patch_result_handler()


class MaintenanceStep(bootsteps.StartStopStep):
    """Runs heartbeat, recovery and sweeping in the worker's main process."""

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.maintenance: Any = None

    def start(self, worker: Any) -> None:
        """Start the maintenance thread."""
        from toolq.backend import Backend
        from toolq.workers.maintenance import Maintenance

        app = worker.app
        queues = sorted(app.amqp.queues.consume_from or app.amqp.queues)
        self.maintenance = Maintenance(
            Backend(app.toolq_settings, app.toolq_registry, celery=app),
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


def create_celery(
    settings: Settings, registry: ToolRegistry, *, async_slots: int | None = None
) -> Celery:
    """``celery_app(settings)`` with the tasks that run ``registry``'s calls and the sweeper.

    Library code never imports a global app: every process builds its own from settings.
    ``async_slots``: the ``async def`` calls each pool process runs at once (default
    ``Settings.async_concurrency``: ``toolq worker`` shares it out between prefork processes).
    """
    app = celery_app(settings)
    app.toolq_settings = settings
    app.toolq_registry = registry
    holder = _PerProcess(settings, registry, app, async_slots)
    keys = Keys(settings.key_prefix)
    risks = {keys.queue_for(risk): risk for risk in RiskLevel}
    app.toolq_runtimes = holder

    @app.task(
        name=TASK_NAME,
        ignore_result=True,
        acks_late=True,
        reject_on_worker_lost=True,
        shared=False,
        bind=True,
        Request=CarriedAck,
    )
    def execute(task: Any, call_id: str, run_id: str | None = None) -> bool | None:
        run_id = run_id if isinstance(run_id, str) else None
        tag = holder.ack_of(task.request)
        holder.get().run(str(call_id), run_id, tag)
        return holder.carried(tag)

    def route_of(request: Any) -> Route | None:
        """Where a message came from (its queue's risk, its time limit); ``None`` if unknown."""
        info = request.delivery_info or {}
        risk = risks.get(info.get("routing_key") or "")
        if risk is None:
            return None
        hard = (request.timelimit or (None, None))[0]
        return Route(risk, None if hard is None else float(hard) - HARD_LIMIT_GRACE)

    @app.task(
        name=BATCH_TASK_NAME,
        ignore_result=True,
        acks_late=True,
        reject_on_worker_lost=True,
        shared=False,
        bind=True,
        Request=CarriedAck,
    )
    def execute_many(task: Any, calls: list[list[str]]) -> bool | None:
        # Acknowledged when every call is final or given back: a worker lost mid-message gets
        # it redelivered, and START skips the calls already started or final.
        pairs = [(str(c[0]), str(c[1])) for c in calls]
        # [call_id, run_id, kind]; an earlier client's pairs leave the worker to read kinds
        kinds = (
            {str(c[0]): c[2] == "async" for c in calls} if all(len(c) > 2 for c in calls) else None
        )
        tag = holder.ack_of(task.request)
        holder.get().run_many(pairs, route_of(task.request), kinds, tag)
        return holder.carried(tag)

    @app.task(name=PREVIEW_TASK_NAME, ignore_result=True, acks_late=True, shared=False)
    def preview(call_id: str) -> None:
        holder.get().preview(call_id)

    @app.task(name=UNDO_TASK_NAME, ignore_result=True, acks_late=True, shared=False)
    def undo(call_id: str) -> None:
        holder.get().undo(call_id)

    def clear_flag(**_: Any) -> None:  # a process replacing a killed one: its flag is free
        if isinstance(holder.siblings, ProcessSiblings):
            holder.siblings.leave()

    signals.worker_process_init.connect(clear_flag, weak=False)
    app.steps["worker"].add(AcksHere)
    app.steps["worker"].add(SlotsOfTheWorker)
    app.steps["worker"].add(ResultPipesOnce)
    app.steps["worker"].add(MaintenanceStep)
    # The heartbeat counts calls, not messages: a batch message carries several.
    signals.task_received.connect(count_received, weak=False, dispatch_uid="toolq.heartbeat")
    return app
