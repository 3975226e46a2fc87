"""``bench.peers.apps:registry`` with probes, for ``bench.probes.async_timeline``'s workers.

``toolq worker --app bench.probes.timeline_app:registry`` serves the same tools; with
``BENCH_TIMELINE_LOG`` set to a directory, each worker process also appends one JSON line per
step of a message to ``<dir>/<pid>.jsonl``, stamped with ``time.time()``:

- ``received``: Celery's consumer decoded the message (``task_received``, its thread);
- ``prerun`` / ``postrun``: a pool thread began / ended its task (``task_prerun``/``postrun``);
- ``brpop_sent`` / ``brpop_read``: the consumer's BRPOP for the next message, and its
  handling of the reply (``_timed_kombu``);
- ``start_many`` / ``finish_many``: one round trip of ``CallStore.commit`` (wrapped here,
  nothing else changed): when it was sent, when its reply was back, and the calls it
  started / finished (a round trip that did both notes both).

After each task, ``<dir>/<pid>.threads.json`` maps the process's native thread ids to their
names, so the timeline can split the process's CPU (``/proc/<pid>/task``) by thread.
Every line names the calls it is about, so the timeline joins them to the calls' records.
The probes cost a ``time.time()`` and a line written per step (about 200 lines a run).
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from celery import signals

from bench.peers.apps import registry
from toolq.results.store import CallStore
from toolq.workers.heartbeat import calls_of

__all__ = ["registry"]

LOG_ENV = "BENCH_TIMELINE_LOG"


class _Log:
    """This process's lines, written as they come (a stopped worker loses none)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()

    def note(self, step: str, calls: Sequence[str], **times: float) -> None:
        line = json.dumps(
            {
                "step": step,
                "pid": os.getpid(),
                "thread": threading.get_ident(),
                "calls": list(calls),
                **times,
            }
        )
        with self._lock, (self.directory / f"{os.getpid()}.jsonl").open("a") as out:
            out.write(line + "\n")

    def name_threads(self) -> None:
        """Write ``{native thread id: name}`` of this process (to split its CPU by thread)."""
        names = {t.native_id: t.name for t in threading.enumerate()}
        with self._lock:
            (self.directory / f"{os.getpid()}.threads.json").write_text(json.dumps(names))


def _timed(log: _Log) -> None:
    """Wrap ``CallStore.commit`` to note each round trip and the calls it finished and started."""
    original = CallStore.commit

    @functools.wraps(original)
    def timed(self: CallStore, finished: Sequence[Any], starts: Sequence[Any], *args: Any) -> Any:
        sent = time.time()
        try:
            return original(self, finished, starts, *args)
        finally:
            back = time.time()
            if finished:
                log.note("finish_many", [str(f[0].call_id) for f in finished], sent=sent, back=back)
            if starts:
                log.note("start_many", [str(s[0]) for s in starts], sent=sent, back=back)

    CallStore.commit = timed  # type: ignore[method-assign]


def _timed_kombu(log: _Log) -> None:
    """Note each BRPOP the consumer sends and each reply it handles (kombu's Redis channel).

    ``brpop`` lines: ``sent`` when the consumer asked for the next message; ``read`` when
    it began reading the reply; ``handled`` when it had delivered that message (kombu's
    ``unacked`` bookkeeping, Celery's strategy and ``task_received``, the pool's submit).
    """
    from kombu.transport import redis as transport

    start, read = transport.Channel._brpop_start, transport.Channel._brpop_read

    @functools.wraps(start)
    def brpop_start(self: Any, *args: Any, **kwargs: Any) -> Any:
        log.note("brpop_sent", [], at=time.time())
        return start(self, *args, **kwargs)

    @functools.wraps(read)
    def brpop_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.time()
        try:
            return read(self, *args, **kwargs)
        finally:
            log.note("brpop_read", [], began=began, handled=time.time())

    transport.Channel._brpop_start = brpop_start
    transport.Channel._brpop_read = brpop_read


def _install(log: _Log) -> None:
    def received(request: Any = None, **_: Any) -> None:
        if request is not None:
            log.note("received", calls_of(request), at=time.time())

    def prerun(args: Any = None, **_: Any) -> None:
        log.note("prerun", _task_calls(args), at=time.time())

    def postrun(args: Any = None, **_: Any) -> None:
        log.note("postrun", _task_calls(args), at=time.time())
        log.name_threads()

    signals.task_received.connect(received, weak=False, dispatch_uid="bench.timeline.received")
    signals.task_prerun.connect(prerun, weak=False, dispatch_uid="bench.timeline.prerun")
    signals.task_postrun.connect(postrun, weak=False, dispatch_uid="bench.timeline.postrun")
    _timed(log)
    _timed_kombu(log)


def _task_calls(args: Any) -> list[str]:
    """The call ids of a ``toolq.execute_many`` task's arguments (``[]`` for other tasks)."""
    if isinstance(args, list | tuple) and args and isinstance(args[0], list):
        return [str(pair[0]) for pair in args[0] if isinstance(pair, list) and pair]
    return []


if os.environ.get(LOG_ENV):
    _install(_Log(Path(os.environ[LOG_ENV])))

if os.environ.get("BENCH_SWITCH_INTERVAL"):  # experiment: a shorter GIL hand-off
    import sys

    sys.setswitchinterval(float(os.environ["BENCH_SWITCH_INTERVAL"]))
