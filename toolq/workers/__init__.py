"""Workers: the Celery app and its one task, ``WorkerRuntime``, ``Maintenance``.

``Executor`` and ``Middleware`` live in ``toolq.execution``; they are re-exported here,
where they were first published.
"""

from toolq.execution import AfterHook, BeforeHook, Executor, Middleware

__all__ = ["AfterHook", "BeforeHook", "Executor", "Middleware"]
