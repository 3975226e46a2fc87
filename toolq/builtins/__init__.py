"""Opt-in built-in toolkits; each returns a list of tools for ``registry.include(...)``.

::

    registry.include(toolq.builtins.files(root="/srv/work"))
    registry.include(toolq.builtins.shell(root="/srv/work", limits=SandboxLimits(timeout=30)))
    registry.include(toolq.builtins.python(root="/srv/work"))
    registry.include(toolq.builtins.http(allow_hosts=["api.example.com"]))

``files``: read_file (SAFE), write_file / append_file / insert_lines (MODERATE, with preview
diff and undo), jailed to the root. ``shell``: run_shell, and run_shell_script with
``allow_shell=True``; ``python``: run_python (all DANGEROUS, run in :class:`Sandbox`).
``http``: http_fetch (MODERATE) with SSRF protection.
"""

from toolq.builtins.files import files
from toolq.builtins.http import http
from toolq.builtins.python import python
from toolq.builtins.sandbox import Sandbox, SandboxLimits, SandboxResult
from toolq.builtins.shell import shell
from toolq.builtins.workspace import Workspace

__all__ = [
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "Workspace",
    "files",
    "http",
    "python",
    "shell",
]
