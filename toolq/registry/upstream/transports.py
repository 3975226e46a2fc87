"""How a worker reaches an upstream server: a stdio process it starts, or Streamable HTTP.

A stdio server is started from a ``Launch``: the argv, environment and descriptors to start
it with. ``direct`` starts the command itself in a new process group; ``toolq.builtins``'
``Sandbox.launch`` starts it under the sandbox's supervisor (own namespaces, unprivileged
user, limits), as the shell tools run. Either way the server's stderr is the worker's, and
stopping it closes its stdin, then signals its process group (the supervisor then kills and
reaps every process the server started).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import anyio
import mcp_types as types
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

log = logging.getLogger("toolq.upstream")

STOP_GRACE = 2.0
"""Seconds a stdio server gets to exit after its stdin closes, then after SIGTERM."""
INHERITED = ("PATH", "HOME", "LANG")
"""What an unsandboxed stdio server inherits from the worker's environment."""


@dataclass(frozen=True)
class Launch:
    """How to start one stdio server process."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    pass_fds: tuple[int, ...] = ()
    """Descriptors the server inherits; the transport closes its copies once it started."""
    status: int | None = None
    """Read end of the sandbox supervisor's status pipe (why the command did not start);
    the launcher closes it when its context ends."""


class Launcher(Protocol):
    """Starts stdio servers: ``toolq.builtins.Sandbox`` is one."""

    def check(self) -> None:
        """Raise ``ConfigurationError`` if this host cannot start servers this way."""
        ...

    def launch(self, argv: Sequence[str], env: Mapping[str, str]) -> AbstractContextManager[Launch]:
        """The launch of ``argv`` with ``env``, valid while the context is open."""
        ...


@contextlib.contextmanager
def direct(argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> Iterator[Launch]:
    """Start the command as it is, with ``env`` over PATH/HOME/LANG of this process."""
    inherited = {name: os.environ[name] for name in INHERITED if name in os.environ}
    yield Launch(list(argv), {**inherited, **env}, cwd)


class StdioExit:
    """How a stdio server ended: its status and, under the sandbox, the supervisor's report."""

    def __init__(self) -> None:
        self.ended = anyio.Event()
        self.returncode: int | None = None
        self.report: str = ""

    def describe(self) -> str:
        """``exited with status 1``, ``was killed by signal 9``, or the sandbox's reason."""
        if self.report:
            return self.report
        code = self.returncode
        if code is None:
            return "closed its output"
        return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"


@contextlib.asynccontextmanager
async def stdio(launch: Launch, ended: StdioExit) -> AsyncIterator[TransportStreams]:
    """Run a server from ``launch`` and exchange newline-delimited JSON-RPC with it."""
    try:
        process = await anyio.open_process(
            launch.argv,
            env=launch.env,
            cwd=launch.cwd,
            stderr=None,
            start_new_session=True,
            pass_fds=launch.pass_fds,
        )
    finally:
        for fd in launch.pass_fds:
            os.close(fd)  # the child holds its copy; ours would keep the status pipe open
    reader, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, writer = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        assert process.stdout is not None
        async with reader:
            buffer = ""
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for chunk in TextReceiveStream(process.stdout, errors="replace"):
                    lines = (buffer + chunk).split("\n")
                    buffer = lines.pop()
                    for line in lines:
                        if line.strip():
                            await reader.send(_parse(line))
        await _settle(process, launch, ended)

    async def write_stdin() -> None:
        assert process.stdin is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with writer:
                async for message in writer:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stdout)
        tasks.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                await _settle(process, launch, ended)
            tasks.cancel_scope.cancel()


def _parse(line: str) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


async def _stop(process: Process) -> None:
    """Close stdin; after the grace, SIGTERM then SIGKILL the process group."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(STOP_GRACE):
        await process.wait()
    if process.returncode is None:
        await terminate_posix_process_tree(process, STOP_GRACE)
    with anyio.move_on_after(STOP_GRACE):
        await process.wait()


async def _settle(process: Process, launch: Launch, ended: StdioExit) -> None:
    """Record how the server ended, once it has."""
    if ended.ended.is_set():
        return
    with anyio.move_on_after(STOP_GRACE):
        await process.wait()
    ended.returncode = process.returncode
    if launch.status is not None:
        ended.report = _supervisor_error(launch.status)
    ended.ended.set()


def _supervisor_error(fd: int) -> str:
    """The sandbox supervisor's reason when the command did not start ("" if it did)."""
    with contextlib.suppress(OSError, ValueError):
        os.set_blocking(fd, False)
        with os.fdopen(fd, "rb", closefd=False) as pipe:
            for line in (pipe.read() or b"").splitlines():
                report = json.loads(line)
                if "error" in report:
                    return f"could not start in the sandbox: {report['error']}"
    return ""


@contextlib.asynccontextmanager
async def http(url: str, headers: Mapping[str, str]) -> AsyncIterator[TransportStreams]:
    """A Streamable HTTP connection sending ``headers`` with every request."""
    async with (
        create_mcp_http_client(headers=dict(headers)) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


Opener = Callable[[], contextlib.AbstractAsyncContextManager[TransportStreams]]
"""Opens a fresh transport to the server (one per session)."""
