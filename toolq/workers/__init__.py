"""Execution: the in-process ``Executor``, middleware, and the Celery app that runs it."""

from toolq.workers.executor import Executor
from toolq.workers.middleware import AfterHook, BeforeHook, Middleware

__all__ = ["AfterHook", "BeforeHook", "Executor", "Middleware"]
