"""Registry of built-in tools for the end-to-end test (loaded by real worker processes).

The workspace comes from ``TOOLQ_BUILTINS_ROOT``; without it (a process that only
dispatches) a throwaway directory stands in.
"""

from __future__ import annotations

import os
import tempfile

from toolq import ToolRegistry
from toolq.builtins import SandboxLimits, files, shell

ROOT = os.environ.get("TOOLQ_BUILTINS_ROOT") or tempfile.mkdtemp(prefix="toolq-app-")

registry = ToolRegistry()
registry.include(files(root=ROOT))
registry.include(shell(root=ROOT, limits=SandboxLimits(timeout=20, processes=32)))
