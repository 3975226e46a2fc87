"""Registry of built-in tools for the end-to-end test (loaded by real worker processes).

The workspace comes from ``TOOLQ_BUILTINS_ROOT``; without it (a process that only
dispatches) a throwaway directory stands in. ``TOOLQ_BUILTINS_ISOLATION=none`` builds the
sandboxed tools without namespaces (the explicit opt-out).
"""

from __future__ import annotations

import os
import tempfile

from toolq import ToolRegistry
from toolq.builtins import SandboxLimits, files, python, shell

ROOT = os.environ.get("TOOLQ_BUILTINS_ROOT") or tempfile.mkdtemp(prefix="toolq-app-")
ISOLATION = "none" if os.environ.get("TOOLQ_BUILTINS_ISOLATION") == "none" else "namespaces"

registry = ToolRegistry()
registry.include(files(root=ROOT))
limits = SandboxLimits(timeout=20, processes=32)
registry.include(shell(root=ROOT, limits=limits, isolation=ISOLATION))
registry.include(python(root=ROOT, limits=limits, isolation=ISOLATION))
