"""Task names, the encoder (``Publisher``) and the decoder (``decode``) of toolq's messages.

A toolq message is Celery's task message (protocol 2: ``create_task_message``) in the
envelope kombu's Redis transport pushes onto a queue: JSON, base64 body, persistent
delivery. Dispatch, approval and undo scripts push it themselves, in the same script that
writes the record, so the encoder must produce exactly what kombu would;
``tests/broker/test_wire.py`` holds it to that.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from celery import Celery
from kombu import serialization
from kombu.utils.json import dumps as kombu_dumps

from toolq.broker.app import HARD_LIMIT_GRACE
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.settings import Settings

TASK_NAME = "toolq.execute"
"""Run a call; arguments ``[call_id, run_id]``."""
BATCH_TASK_NAME = "toolq.execute_many"
"""Run several calls of one risk as slots free; one argument ``[[call_id, run_id, kind], ...]``.

``kind`` is ``"async"`` for a call of an ``async def`` tool, else ``"sync"``; messages of
earlier clients carry ``[call_id, run_id]`` pairs (the worker then reads the kinds)."""
UNDO_TASK_NAME = "toolq.undo"
"""Run a finished call's undo handler; arguments ``[call_id]``."""
PREVIEW_TASK_NAME = "toolq.preview"
"""Compute a parked call's preview; arguments ``[call_id]``."""
ARGSREPR_MAX = 1024
"""Celery's cut-off for the ``argsrepr`` header (``amqp.argsrepr_maxsize``)."""


class Publisher:
    """Encodes toolq's messages and sends them to the queue of their risk level."""

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
                self.app.send_task(
                    TASK_NAME,
                    args=[call_id, run_id] if run_id else [call_id],
                    queue=self.keys.queue_for(risk),
                    producer=producer,
                    ignore_result=True,
                    **_limits(timeout),
                )

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
        return queue, self._envelope(queue, TASK_NAME, [call_id, run_id], _limits(timeout))

    def batch_message(
        self, calls: Sequence[Sequence[str]], risk: RiskLevel, timeout: float | None
    ) -> tuple[str, str]:
        """The queue and the one message carrying ``(call_id, run_id, kind)`` of several calls.

        The calls share their risk level and time limit (Celery's is per message). The
        script that creates them pushes it (``create_group.lua``), as ``message`` is.
        """
        queue = self.keys.queue_for(risk)
        pairs = [list(call) for call in calls]
        return queue, self._envelope(queue, BATCH_TASK_NAME, [pairs], _limits(timeout))

    def undo_message(self, call_id: str, risk: RiskLevel) -> tuple[str, str]:
        """The queue and message of a call's undo, pushed by the script that requests it."""
        queue = self.keys.queue_for(risk)
        return queue, self._envelope(queue, UNDO_TASK_NAME, [call_id], {})

    def _envelope(self, queue: str, task_name: str, args: list[Any], options: Any) -> str:
        """Celery's task message in kombu's Redis transport envelope (see ``message``)."""
        task = self.app.amqp.create_task_message(
            str(uuid.uuid4()),
            task_name,
            args,
            {},
            reply_to=self.app.thread_oid,
            ignore_result=True,
            argsrepr=_argsrepr(args),
            kwargsrepr="{}",
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


def _argsrepr(args: list[Any]) -> str:
    """The ``argsrepr`` header: ``repr`` cut at Celery's 1,024 characters.

    Celery computes it with ``saferepr``, which walks nested lists one token at a time:
    about a tenth of a batch dispatch's client CPU. toolq's arguments are lists of id
    strings, whose ``repr`` is the same text.
    """
    text = repr(args)
    return text if len(text) <= ARGSREPR_MAX else text[: ARGSREPR_MAX - 3] + "..."


def _limits(timeout: float | None) -> dict[str, Any]:
    """Celery's ``time_limit`` option for a call's own timeout (its hard kill, with grace)."""
    return {} if timeout is None else {"time_limit": timeout + HARD_LIMIT_GRACE}


@dataclass(frozen=True)
class Delivery:
    """One decoded toolq message: its task, its arguments and kombu's delivery tag."""

    task: str
    args: tuple[Any, ...]
    delivery_tag: str

    @property
    def call_ids(self) -> tuple[str, ...]:
        """The calls the message is about: a batch's, or every other task's first argument."""
        if self.task == BATCH_TASK_NAME:
            return tuple(str(pair[0]) for pair in self.args[0])
        return (str(self.args[0]),)

    @property
    def call_id(self) -> str:
        """The (first) call the message is about."""
        return self.call_ids[0]


def decode(raw: bytes | str | dict[str, Any] | None) -> Delivery | None:
    """The ``Delivery`` of a message as kombu's Redis transport stores it, if it is toolq's.

    ``raw`` is a queue entry (the envelope ``Publisher`` builds) or its parsed JSON; any
    other task, or anything that is not such a message, gives ``None``.
    """
    if raw is None:
        return None
    try:
        message = json.loads(raw) if isinstance(raw, bytes | str) else raw
        task = message["headers"].get("task")
        if task not in (TASK_NAME, BATCH_TASK_NAME, UNDO_TASK_NAME, PREVIEW_TASK_NAME):
            return None
        properties = message["properties"]
        body = message["body"]
        if properties.get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        if not isinstance(args, list) or not args:
            return None
        if task == BATCH_TASK_NAME and not _pairs(args[0]):
            return None
        return Delivery(str(task), tuple(args), str(properties.get("delivery_tag", "")))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def _pairs(value: Any) -> bool:
    """Whether ``value`` is a batch's non-empty ``[[call_id, run_id, kind?], ...]``.

    Dispatches send ``(call_id, run_id, kind)``; messages sent before ``kind`` existed have
    pairs. Either is read: a batch message left in kombu's ``unacked`` hash by a killed
    worker must be recognised to be sent again.
    """
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(p, list) and len(p) in (2, 3) and isinstance(p[0], str) for p in value)
    )
