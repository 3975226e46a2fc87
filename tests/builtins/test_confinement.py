"""What sandboxed code cannot reach whatever the isolation: unix sockets anywhere on the host
(a private Redis, plain servers in /run, /tmp, an arbitrary directory, the abstract
namespace), raised privileges through setuid binaries, and the syscalls the seccomp filter
refuses.

Each listener is first reached by the same attack code run as the sandbox's uid outside the
sandbox: the control that shows the attack is real and only the sandbox stops it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from toolq import CallStatus, ToolRegistry
from toolq.builtins import SandboxLimits, python, shell
from toolq.builtins.seccomp import ARCHITECTURES, DENIED

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox drops to nobody as root")

MODES: dict[str, dict[str, Any]] = {
    "namespaces": {},
    "network": {"network": True},
    "none": {"isolation": "none"},
}
NOBODY = 65534

SOCKET_ATTACK = """
import json, socket, sys
for name, kind, address in json.loads(sys.argv[1]):
    try:
        if kind == "dgram":  # a datagram pair may name any datagram socket as its target
            pair, _ = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            pair.sendto(b"PING\\r\\n", address)
            print(name, "sent")
            continue
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(5)
        conn.connect(address.replace("@", "\\0", 1) if address.startswith("@") else address)
        conn.sendall(b"PING\\r\\n")
        print(name, "answered", conn.recv(64))
    except OSError as exc:
        print(name, "refused", exc.errno)
"""


@dataclass
class Listener:
    name: str
    kind: str  # "stream" | "dgram"
    address: str  # a path, or "@name" for the abstract namespace
    received: list[bytes]


def _serve(server: socket.socket, listener: Listener) -> None:
    with contextlib.suppress(OSError):
        while True:
            if listener.kind == "dgram":
                listener.received.append(server.recv(64))
                continue
            conn, _ = server.accept()
            with conn:
                listener.received.append(conn.recv(64))
                conn.sendall(b"+PONG\r\n")


@pytest.fixture
def host_dirs() -> Iterator[dict[str, Path]]:
    """Directories of the host the test owns: under /run, /var/lib (any directory) and /tmp."""
    tag = uuid.uuid4().hex[:12]
    made = {
        where: Path(parent) / f"toolq-test-{tag}"
        for where, parent in (("run", "/run"), ("anywhere", "/var/lib"), ("tmp", "/tmp"))
    }
    for path in made.values():
        path.mkdir(mode=0o755)
    yield made
    for path in made.values():
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def private_redis(host_dirs: dict[str, Path]) -> Iterator[str]:
    """A redis-server of this test's own, listening on a unix socket only (mode 777)."""
    path = host_dirs["run"] / "redis.sock"
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--unixsocket",
            str(path),
            "--unixsocketperm",
            "777",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(host_dirs["run"]),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not path.exists():
            assert server.poll() is None and time.monotonic() < deadline, "redis did not start"
            time.sleep(0.02)
        yield str(path)
    finally:
        server.kill()
        server.wait()


@pytest.fixture
def listeners(host_dirs: dict[str, Path], private_redis: str) -> Iterator[list[Listener]]:
    """Stream listeners in /run, /tmp, /var/lib and the abstract namespace, a datagram one."""
    tag = uuid.uuid4().hex[:12]
    made = [
        Listener("redis", "stream", private_redis, []),
        Listener("run", "stream", str(host_dirs["run"] / "plain.sock"), []),
        Listener("tmp", "stream", str(host_dirs["tmp"] / "plain.sock"), []),
        Listener("anywhere", "stream", str(host_dirs["anywhere"] / "plain.sock"), []),
        Listener("abstract", "stream", f"@toolq-test-{tag}", []),
        Listener("datagram", "dgram", str(host_dirs["anywhere"] / "dgram.sock"), []),
    ]
    servers = []
    for listener in made[1:]:
        kind = socket.SOCK_DGRAM if listener.kind == "dgram" else socket.SOCK_STREAM
        server = socket.socket(socket.AF_UNIX, kind)
        address = listener.address
        server.bind("\0" + address[1:] if address.startswith("@") else address)
        if not address.startswith("@"):
            os.chmod(address, 0o777)
        if kind == socket.SOCK_STREAM:
            server.listen()
        threading.Thread(target=_serve, args=(server, listener), daemon=True).start()
        servers.append(server)
    yield made
    for server in servers:
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_RDWR)
        server.close()


def make_registry(workspace: Path, mode: str) -> ToolRegistry:
    reg = ToolRegistry()
    limits = SandboxLimits(timeout=20)
    reg.include(shell(root=workspace, allow_shell=True, limits=limits, **MODES[mode]))
    reg.include(python(root=workspace, limits=limits, **MODES[mode]))
    return reg


def run(reg: ToolRegistry, name: str, **args: Any) -> dict[str, Any]:
    result = reg.invoke(name, args)
    assert result.status is CallStatus.SUCCEEDED, result.error
    output: dict[str, Any] = result.output
    return output


def interpreter(reg: ToolRegistry) -> str:
    tool: Any = reg.get("run_python")
    executable: str = tool.executable
    return executable


def as_nobody(argv: list[str], cwd: Path | str = "/") -> str:
    """Run ``argv`` as the sandbox's uid, outside the sandbox: the control."""
    done = subprocess.run(
        argv,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.stdout + done.stderr


def targets(made: list[Listener]) -> str:
    return json.dumps([[x.name, x.kind, x.address] for x in made])


@pytest.mark.parametrize("mode", list(MODES))
def test_no_unix_socket_of_the_host_answers(
    workspace: Path, listeners: list[Listener], mode: str
) -> None:
    reg = make_registry(workspace, mode)
    control = as_nobody([interpreter(reg), "-I", "-c", SOCKET_ATTACK, targets(listeners)])
    assert control.splitlines() == [
        "redis answered b'+PONG\\r\\n'",
        *(f"{x.name} answered b'+PONG\\r\\n'" for x in listeners[1:-1]),
        "datagram sent",
    ], control
    time.sleep(0.2)
    for listener in listeners:
        listener.received.clear()

    out = run(reg, "run_python", code=SOCKET_ATTACK, args=[targets(listeners)])
    assert out["stdout"].splitlines() == [f"{x.name} refused {errno.EPERM}" for x in listeners]
    # curl speaks to unix sockets too; it cannot make one either
    script = " ; ".join(
        f"curl -sS -m 5 --unix-socket {x.address} http://toolq/" for x in listeners[:4]
    )
    by_shell = run(reg, "run_shell_script", script=script)
    assert "PONG" not in by_shell["stdout"] and by_shell["stderr"].count("curl: (7)") == 4
    time.sleep(0.2)
    assert [x.received for x in listeners] == [[]] * len(listeners)


def test_socket_pairs_and_the_network_families_still_work(workspace: Path) -> None:
    """asyncio and multiprocessing pipes use stream pairs; the refusal is AF_UNIX only."""
    reg = make_registry(workspace, "network")
    code = (
        "import asyncio, multiprocessing, socket\n"
        "async def main():\n"
        "    await asyncio.sleep(0)\n"
        "    return 'loop'\n"
        "print(asyncio.run(main()))\n"
        "a, b = multiprocessing.Pipe()\n"
        "a.send('pipe'); print(b.recv())\n"
        "for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):\n"
        "    kind = socket.SOCK_RAW if family == socket.AF_NETLINK else socket.SOCK_STREAM\n"
        "    socket.socket(family, kind).close()\n"
        "print('families')\n"
        "socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
        "print('seqpacket')\n"
    )
    out = run(reg, "run_python", code=code)
    assert out["stdout"] == "loop\npipe\nfamilies\nseqpacket\n", out["stderr"]


@pytest.mark.parametrize("mode", list(MODES))
def test_no_new_privs_and_the_filter_are_on(workspace: Path, mode: str) -> None:
    reg = make_registry(workspace, mode)
    wanted = "^(NoNewPrivs|Seccomp|CapEff):"
    out = run(reg, "run_shell", argv=["grep", "-E", wanted, "/proc/self/status"])
    fields = dict(line.split(":\t") for line in out["stdout"].splitlines())
    assert fields == {"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000000000"}


@pytest.mark.parametrize("mode", ["namespaces", "none"])
def test_a_setuid_root_binary_does_not_raise_privileges(workspace: Path, mode: str) -> None:
    reg = make_registry(workspace, mode)
    binary = workspace / "id"
    shutil.copy("/usr/bin/id", binary)
    os.chmod(binary, 0o4755)  # owned by root: setuid root
    assert "euid=0(root)" in as_nobody([str(binary)])  # the control: it does escalate
    out = run(reg, "run_shell", argv=["./id"])
    assert out["stdout"].startswith(f"uid={NOBODY}(") and "euid" not in out["stdout"]
    code = "import os; os.execv('./id', ['./id', '-u'])"
    assert run(reg, "run_python", code=code)["stdout"] == f"{NOBODY}\n"


SYSCALL_ATTACK = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
numbers = json.loads(sys.argv[1])
for name, nr in sorted(numbers.items()):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(nr), 0, 0, 0, 0, 0)
    print(name, result, ctypes.get_errno())
# a user namespace by clone(): refused, where a plain fork is not
SIGCHLD, CLONE_NEWUSER = 17, 0x10000000
for flags in (SIGCHLD, SIGCHLD | CLONE_NEWUSER):
    pid = libc.syscall(ctypes.c_long(int(sys.argv[2])), flags, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    print("clone", hex(flags), "forked" if pid > 0 else ctypes.get_errno())
"""


def test_the_filter_refuses_its_syscalls(workspace: Path) -> None:
    arch = ARCHITECTURES[platform.machine()]
    numbers = {name: arch.numbers[name] for name in (*DENIED, *arch.denied_here, "clone3")}
    reg = make_registry(workspace, "namespaces")
    out = run(
        reg,
        "run_python",
        code=SYSCALL_ATTACK,
        args=[json.dumps(numbers), str(arch.numbers["clone"])],
    )
    lines = out["stdout"].splitlines()
    expected = {name: f"{name} -1 {errno.EPERM}" for name in numbers}
    expected["clone3"] = f"clone3 -1 {errno.ENOSYS}"
    assert lines[:-2] == [expected[name] for name in sorted(numbers)], out["stderr"]
    assert lines[-2:] == ["clone 0x11 forked", f"clone 0x10000011 {errno.EPERM}"]


def test_real_attacks_the_filter_stops(workspace: Path) -> None:
    """A user namespace (root inside it), a tracer, the keyrings: each works as nobody outside."""
    reg = make_registry(workspace, "namespaces")
    keyctl = ARCHITECTURES[platform.machine()].numbers["keyctl"]
    prelude = "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    attacks = {
        "userns": ["unshare", "--user", "--map-root-user", "id", "-u"],
        # PTRACE_TRACEME; KEYCTL_GET_KEYRING_ID of the user keyring, created if need be
        "ptrace": ["python3", "-c", prelude + "print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())"],
        "keyctl": [
            "python3",
            "-c",
            prelude + f"print(libc.syscall({keyctl}, 0, -4, 1), ctypes.get_errno())",
        ],
    }
    controls = {name: as_nobody(argv, cwd=workspace).strip() for name, argv in attacks.items()}
    assert controls["userns"] == "0"  # root in a namespace of its own
    assert controls["ptrace"] == "0 0" and controls["keyctl"].split()[1] == "0"
    out = {name: run(reg, "run_shell", argv=argv) for name, argv in attacks.items()}
    assert "Operation not permitted" in out["userns"]["stderr"]
    assert out["ptrace"]["stdout"] == f"-1 {errno.EPERM}\n"
    assert out["keyctl"]["stdout"] == f"-1 {errno.EPERM}\n"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 is an x86_64 ABI")
def test_another_abi_kills_the_process(workspace: Path) -> None:
    reg = make_registry(workspace, "namespaces")
    code = "import ctypes; print(ctypes.CDLL(None).syscall(0x40000000 | 39))"  # x32 getpid
    out = run(reg, "run_python", code=code)
    assert out["exit_code"] == -31 and out["stdout"] == ""  # SIGSYS
