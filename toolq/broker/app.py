"""``celery_app(settings)``: the Celery app that speaks to the broker, with no tasks in it.

Clients publish through it; ``toolq.workers.create_celery`` adds the tasks and the
maintenance step to the same configuration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps as kombu_dumps
from kombu.utils.objects import cached_property as kombu_cached_property
from redis import exceptions as redis_errors

from toolq.broker import acks
from toolq.broker.held import held_for
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.redis_failures import refusal, unblocked
from toolq.redis_target import RedisTarget
from toolq.settings import Settings

log = logging.getLogger("toolq.broker")

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


def _client_per_pool(self: Any, asynchronous: bool = False) -> Any:
    """``Channel._create_client`` of kombu, its synchronous client built once per pool.

    kombu builds a new ``redis.Redis`` for every ``conn_or_acquire``: twice per message
    (recording it as unacknowledged, then acknowledging it), about a tenth of a worker's
    CPU per call. The client holds no connection of its own (the pool does), so one per
    pool serves every thread. ``self.pool`` is read first, exactly as kombu reads it: once
    the channel is closed (its pools dropped) that raises as before
    (``_connparams_unless_closed``), and a new pool after a reconnect gets a new client.
    """
    if asynchronous:
        return _KOMBU_CREATE_CLIENT(self, asynchronous=True)
    pool = self.pool
    cached = self.__dict__.get("_toolq_client")
    if cached is None or cached[0] is not pool:
        cached = (pool, _KOMBU_CREATE_CLIENT(self))
        self.__dict__["_toolq_client"] = cached
    return cached[1]


_KOMBU_CREATE_CLIENT = kombu_redis.Channel._create_client


def _refused(exc: Exception) -> bool:
    """True when ``exc`` is Redis refusing a write (full, read-only, disk, replicas)."""
    return isinstance(exc, redis_errors.ResponseError) and refusal(exc) is not None


def _record_taken(self: Any, message: Any, delivery_tag: str) -> None:
    """What the ``QoS.append`` of kombu writes, in one write without its ``MULTI``.

    kombu wraps the two writes in ``MULTI``/``EXEC``: two more commands to send, parse and
    run per message, for an atomicity toolq's recovery does not need. The index goes first:
    should only it be written (a connection lost in between), the tag has no entry, which
    kombu's restore drops and toolq's sweeper reads as a message never recorded
    (``resend_lost``); an entry without its index is never written.
    """
    # kombu's own append (``_KOMBU_APPEND``) cannot be called without its MULTI: it takes
    # its pipeline from ``QoS.pipe_or_acquire()`` with no pipe to pass, which opens
    # ``client.pipeline()``, a transaction. That helper is the only hook, and ``ack`` and
    # ``reject`` (``_remove_from_indices``) take theirs from it too, so replacing it would
    # change them as well. Its two writes are written out here as kombu writes them (keys,
    # entry, order); tests/broker/test_wire.py compares both on the installed kombu. They go
    # on a connection the consumer's thread keeps (``HeldConnection``), not the pool's.
    delivery = message.delivery_info
    entry = kombu_dumps([message._raw, delivery["exchange"], delivery["routing_key"]])
    held_for(self.channel).write(
        [
            ("ZADD", self.unacked_index_key, time.time(), delivery_tag),
            ("HSET", self.unacked_key, delivery_tag, entry),
        ]
    )
    virtual.QoS.append(self, message, delivery_tag)


def _append_unless_refused(self: Any, message: Any, delivery_tag: str) -> None:
    """The ``QoS.append`` of kombu; a Redis that refuses writes leaves the message unrecorded.

    A message taken (``BRPOP``) is recorded in ``unacked`` (``_record_taken``), which a
    full Redis refuses; the error reached Celery's event loop as an unrecoverable
    one and the worker exited. The message is delivered anyway: its task waits until
    Redis accepts writes to start the call (``WorkerRuntime``), and should this worker die
    first, toolq's sweeper re-sends the call (``resend_lost``: taken, never recorded).
    """
    try:
        _record_taken(self, message, delivery_tag)
    except redis_errors.ResponseError as exc:
        if not _refused(exc):
            raise
        log.warning("Redis refuses writes (%s): message %s not recorded as taken", exc,
                    delivery_tag)  # fmt: skip
        virtual.QoS.append(self, message, delivery_tag)


def _ack_unless_refused(self: Any, delivery_tag: str) -> None:
    """The ``QoS.ack`` of kombu, which a Redis refusing writes cannot stop.

    A full Redis refuses kombu's ``MULTI`` (``ZREM`` + ``HDEL``) whole, though it runs
    both commands alone (they free memory): they are sent alone then. A Redis that refuses
    even those (read-only) keeps the entry; kombu redelivers it after its visibility
    timeout, and the call's ``START`` skips a call that is final. Either way the message is
    acknowledged in this process, so the consumer goes on. An entry the task removed
    already (``toolq.broker.acks``) costs no round trip.
    """
    if acks.take(delivery_tag):
        virtual.QoS.ack(self, delivery_tag)
        return
    try:
        _KOMBU_ACK(self, delivery_tag)
        return
    except redis_errors.ResponseError as exc:
        if not _refused(exc):
            raise
    try:
        with self.channel.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            pipe.zrem(self.unacked_index_key, delivery_tag).hdel(self.unacked_key, delivery_tag)
            pipe.execute()
    except redis_errors.ResponseError as exc:
        if not _refused(exc):
            raise
        log.warning("Redis refuses writes (%s): message %s stays unacknowledged", exc,
                    delivery_tag)  # fmt: skip
    virtual.QoS.ack(self, delivery_tag)


def _reject_unless_refused(self: Any, delivery_tag: str, requeue: bool = False) -> None:
    """The ``QoS.reject`` of kombu: as ``_ack_unless_refused`` when Redis refuses writes.

    An entry removed already (``toolq.broker.acks``) has nothing left to restore.
    """
    if acks.take(delivery_tag):
        virtual.QoS.ack(self, delivery_tag)
        return
    try:
        _KOMBU_REJECT(self, delivery_tag, requeue=requeue)
    except redis_errors.ResponseError as exc:
        if not _refused(exc):
            raise
        _ack_unless_refused(self, delivery_tag)


def _brpop_read_unless_refused(self: Any, **options: Any) -> Any:
    """The ``_brpop_read`` of kombu; ``BRPOP`` refused (a read-only replica) is a lost connection.

    So is a ``BRPOP`` its master ended when demoted to a replica (``UNBLOCKED``: a failover,
    ``REPLICAOF``). Celery then reconnects with its backoff, as after a restart, instead of
    exiting.
    """
    try:
        return _KOMBU_BRPOP_READ(self, **options)
    except redis_errors.ResponseError as exc:
        if not (_refused(exc) or unblocked(exc)):
            raise
        self.client.connection.disconnect()
        raise redis_errors.ConnectionError(f"Redis refuses to hand out messages: {exc}") from exc


def _restore_visible_unless_refused(self: Any, *args: Any, **kwargs: Any) -> None:
    """The ``QoS.restore_visible`` of kombu (its mutex is a ``SET``); refused, it waits a round."""
    try:
        _KOMBU_RESTORE_VISIBLE(self, *args, **kwargs)
    except redis_errors.ResponseError as exc:
        if not _refused(exc):
            raise
        log.info("restoring timed-out messages deferred: Redis refuses writes (%s)", exc)


def _queue_bind_unless_refused(self: Any, *args: Any) -> None:
    """The ``Channel._queue_bind`` of kombu (a ``SADD``); refused, the binding is left as it is.

    Consumers bind their queues on every (re)connection: a worker starting, or its
    consumer reconnecting, while Redis is full keeps the bindings made before.
    """
    try:
        _KOMBU_QUEUE_BIND(self, *args)
    except redis_errors.ResponseError as exc:
        if not _refused(exc):
            raise
        log.warning("queue binding not written: Redis refuses writes (%s)", exc)


def _size_unless_refused(self: Any, queue: str) -> int:
    """The ``Channel._size`` of kombu (``LLEN`` per priority in a ``MULTI``).

    A full Redis refuses the transaction, though it answers the reads alone: a consumer
    declaring its queues (a worker starting, or reconnecting, while Redis is full) then
    reads them without one instead of exiting.
    """
    try:
        return int(_KOMBU_SIZE(self, queue))
    except redis_errors.ResponseError as exc:
        if not _refused(exc):
            raise
    with self.conn_or_acquire() as client:
        pipe = client.pipeline(transaction=False)
        for pri in self.priority_steps:
            pipe.llen(self._q_for_pri(queue, pri))
        return sum(size for size in pipe.execute() if isinstance(size, int))


class ReadersOnce:
    """The worker's event loop (kombu's ``Hub``), as kombu's Redis transport is given it.

    The transport's ``on_poll_start``, run on every turn of the loop, calls ``add_reader``
    for each socket it polls, and the hub registers each with epoll again: a system call
    that fails (``EEXIST``) and an exception caught, per socket per turn, several turns a
    message. Here a socket the hub already reads with the same callback is left as it is.
    Each way a socket stops being polled goes through the hub (``remove_reader``,
    ``remove``: its reader goes with it) or registers the new socket with epoll itself
    (``MultiChannelPoller._register``), so nothing that was polled before stops being.
    """

    def __init__(self, hub: Any) -> None:
        self._hub = hub

    def __getattr__(self, name: str) -> Any:
        return getattr(self._hub, name)

    def add_reader(self, fd: Any, callback: Any, *args: Any) -> Any:
        """``Hub.add_reader``, unless the hub reads ``fd`` with this callback already."""
        if self._hub.readers.get(fd) == (callback, args):
            return None
        return self._hub.add_reader(fd, callback, *args)


def _register_with_event_loop_once(self: Any, connection: Any, loop: Any) -> None:
    """Kombu's ``Transport.register_with_event_loop``, each reader added once."""
    _KOMBU_REGISTER_WITH_EVENT_LOOP(self, connection, ReadersOnce(loop))


def _cached_read(self: Any, instance: Any, owner: Any = None) -> Any:
    """Kombu's ``cached_property.__get__``; a value already cached is read without its lock.

    Kombu's ``cached_property`` has a setter, so every read of one goes through its
    ``__get__`` (the instance's cached value does not shadow it), and that takes an
    ``RLock`` before it looks in the instance's ``__dict__``: a few percent of a prefork
    parent's CPU (``Channel.client``, ``QoS.unacked_key``, Celery's ``app.conf``...). Only
    the first computation needs the lock (one thread computes); the value, once in
    ``__dict__``, is set and removed under the lock and read here as one dictionary lookup.
    """
    if instance is not None:
        try:
            return instance.__dict__[self.attrname]
        except (AttributeError, KeyError):  # no __dict__: kombu's own read says so
            pass
    return _KOMBU_CACHED_GET(self, instance, owner)


_KOMBU_CACHED_GET = kombu_cached_property.__get__
_KOMBU_APPEND = kombu_redis.QoS.append
"""Not called: what ``_record_taken`` writes is checked against it (tests/broker)."""
_KOMBU_RESTORE_VISIBLE = kombu_redis.QoS.restore_visible
_KOMBU_SIZE = kombu_redis.Channel._size
_KOMBU_QUEUE_BIND = kombu_redis.Channel._queue_bind
_KOMBU_ACK = kombu_redis.QoS.ack
_KOMBU_REJECT = kombu_redis.QoS.reject
_KOMBU_BRPOP_READ = kombu_redis.Channel._brpop_read
_KOMBU_REGISTER_WITH_EVENT_LOOP = kombu_redis.Transport.register_with_event_loop


_PATCHES: tuple[tuple[type, str, Callable[..., Any]], ...] = (
    (kombu_redis.Channel, "_connparams", _connparams_unless_closed),
    (kombu_redis.Channel, "_create_client", _client_per_pool),
    (kombu_redis.Channel, "_brpop_read", _brpop_read_unless_refused),
    (kombu_redis.QoS, "append", _append_unless_refused),
    (kombu_redis.QoS, "ack", _ack_unless_refused),
    (kombu_redis.QoS, "reject", _reject_unless_refused),
    (kombu_redis.QoS, "restore_visible", _restore_visible_unless_refused),
    (kombu_redis.Channel, "_queue_bind", _queue_bind_unless_refused),
    (kombu_redis.Channel, "_size", _size_unless_refused),
    (kombu_redis.Transport, "register_with_event_loop", _register_with_event_loop_once),
    (kombu_cached_property, "__get__", _cached_read),
)
"""What ``patch_kombu`` installs: (class, attribute, toolq's replacement)."""


def patch_kombu() -> None:
    """Install ``_connparams_unless_closed`` (celery/kombu#970, #582), ``_client_per_pool``.

    And the ``*_unless_refused`` steps: a Redis that refuses writes (full, read-only) no
    longer makes a worker exit; ``_register_with_event_loop_once`` and ``_cached_read``.
    """
    for owner, name, ours in _PATCHES:
        if getattr(owner, name) is not ours:
            setattr(owner, name, ours)


def celery_app(settings: Settings) -> Celery:
    """A Celery app for toolq's broker: JSON only, late acks, one queue per risk level.

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
    return app
