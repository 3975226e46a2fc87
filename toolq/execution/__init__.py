"""The in-process execution core: ``ToolContext``, ``Middleware``, ``Executor``.

No Redis and no Celery in here: ``registry.invoke`` runs a tool through it in the caller's
process, and a worker wraps the same ``Executor`` in its one task.
"""

from toolq.execution.context import ToolContext
from toolq.execution.executor import Executor
from toolq.execution.middleware import AfterHook, BeforeHook, Middleware

__all__ = ["AfterHook", "BeforeHook", "Executor", "Middleware", "ToolContext"]
