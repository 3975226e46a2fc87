"""The prefork pool's result pipes, registered with epoll once (``patch_result_handler``).

A prefork child sends its parent two messages per task on its result pipe (the task taken,
then its outcome). After reading each, Celery's result handler (``ResultHandler._recv_message``
in ``celery.concurrency.asynpool``) adds the pipe to the event loop again with the callback
it is already read with: an epoll registration that fails (``EEXIST``), an exception caught
and a ``modify``, twice per task in the parent. The handler is given the loop behind
``ReadersOnce`` instead, as kombu's transport is (``toolq.broker.app``), so a pipe the loop
already reads with that callback is left as it is. A message read in parts still swaps the
reader (a generator, then the callback back); a new child's pipe is added by the pool
itself, not through the handler, so it is always registered.
"""

from __future__ import annotations

from typing import Any

from toolq.broker.app import ReadersOnce


def _make_process_result_once(self: Any, hub: Any) -> Any:
    """Celery's ``ResultHandler._make_process_result``, its pipes' readers added once."""
    return _CELERY_MAKE_PROCESS_RESULT(self, ReadersOnce(hub))


_CELERY_MAKE_PROCESS_RESULT: Any = None


def patch_result_handler() -> None:
    """Install ``_make_process_result_once`` on Celery's prefork result handler (idempotent)."""
    global _CELERY_MAKE_PROCESS_RESULT
    from celery.concurrency.asynpool import ResultHandler

    if ResultHandler._make_process_result is _make_process_result_once:
        return
    _CELERY_MAKE_PROCESS_RESULT = ResultHandler._make_process_result
    ResultHandler._make_process_result = _make_process_result_once
