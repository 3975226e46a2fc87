"""The sandbox's namespaces, attacked from inside: no network, private temporary directories,
its own /proc; ``network=True`` and ``isolation="none"`` as the explicit opt-outs; a host
that refuses namespaces makes the worker refuse to start and every call fail unexecuted.

Each attack also runs with ``isolation="none"`` (or ``network=True``) as the control that
shows the attack is real: there it succeeds.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from tests.conftest import ROOT
from toolq import CallStatus, Settings, ToolRegistry
from toolq.builtins import SandboxLimits, python, shell
from toolq.cli.check import missing_queues
from toolq.errors import ConfigurationError
from toolq.models import RiskLevel

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")

MODES: dict[str, dict[str, Any]] = {
    "namespaces": {},
    "network": {"network": True},
    "none": {"isolation": "none"},
}

REDIS_ATTACK = """
import socket, sys
host, port, password, db, key = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
def command(*words):
    parts = [w.encode() for w in words]
    return b"*%d\\r\\n" % len(parts) + b"".join(b"$%d\\r\\n%s\\r\\n" % (len(p), p) for p in parts)
try:
    conn = socket.create_connection((host, port), timeout=5)
    conn.sendall(
        command("AUTH", password) + command("SELECT", db) + command("SET", key, "FORGED")
    )
    print("connected", conn.recv(100))
except OSError as exc:
    print("refused", exc)
"""

HTTP_ATTACK = """
import sys, urllib.request
try:
    print("connected", urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
except OSError as exc:
    print("refused", exc)
"""


def make_registry(workspace: Path, mode: str, **limits: Any) -> ToolRegistry:
    reg = ToolRegistry()
    sandbox_limits = SandboxLimits(**{"timeout": 15, **limits})
    options = MODES[mode]
    reg.include(shell(root=workspace, allow_shell=True, limits=sandbox_limits, **options))
    reg.include(python(root=workspace, limits=sandbox_limits, **options))
    return reg


def run(reg: ToolRegistry, name: str, **args: Any) -> dict[str, Any]:
    result = reg.invoke(name, args)
    assert result.status is CallStatus.SUCCEEDED, result.error
    output: dict[str, Any] = result.output
    return output


class Hits(http.server.BaseHTTPRequestHandler):
    """Stand-in for the API: answers every GET and records its path."""

    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = b"api-reached"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def api_url() -> Iterator[str]:
    Hits.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hits)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def redis_target(settings: Settings) -> list[str]:
    """Host, port, password and database of the suite's Redis: the attacker knows them all."""
    url = urlsplit(settings.redis_url)
    assert url.hostname and url.port and url.password, "the suite's Redis has a password"
    return [url.hostname, str(url.port), url.password, url.path.strip("/") or "0"]


@pytest.mark.parametrize("mode", list(MODES))
def test_redis_and_api_are_out_of_reach(
    workspace: Path, settings: Settings, r: redis.Redis, api_url: str, mode: str
) -> None:
    """The attack: sandboxed code opens TCP to Redis (password and all) and the API."""
    reachable = mode != "namespaces"
    reg = make_registry(workspace, mode)
    target = redis_target(settings)
    keys = [f"attack-{uuid.uuid4().hex}" for _ in range(2)]
    by_python = run(reg, "run_python", code=REDIS_ATTACK, args=[*target, keys[0]])
    script = 'exec 3<>"/dev/tcp/$0/$1" && printf "AUTH %s\\r\\nSELECT %s\\r\\nSET %s X\\r\\n"'
    script += ' "$2" "$3" "$4" >&3 && head -c 15 <&3'
    by_shell = run(reg, "run_shell", argv=["bash", "-c", script, *target, keys[1]])
    written = [bool(r.exists(key)) for key in keys]
    if reachable:
        assert by_python["stdout"].startswith("connected b'+OK\\r\\n+OK\\r\\n+OK")
        assert by_shell["stdout"] == "+OK\r\n" * 3
        assert written == [True, True]
    else:
        assert by_python["stdout"] == "refused [Errno 101] Network is unreachable\n"
        assert by_shell["exit_code"] != 0 and "Network is unreachable" in by_shell["stderr"]
        assert written == [False, False]

    http_python = run(reg, "run_python", code=HTTP_ATTACK, args=[f"{api_url}/from-python"])
    http_shell = run(reg, "run_shell", argv=["curl", "-sS", "-m", "5", f"{api_url}/from-shell"])
    if reachable:
        assert http_python["stdout"] == "connected api-reached\n"
        assert http_shell["stdout"] == "api-reached"
        assert Hits.seen == ["/from-python", "/from-shell"]
    else:
        assert http_python["stdout"].startswith("refused")
        assert http_shell["exit_code"] != 0
        assert Hits.seen == []


def test_only_a_down_loopback(workspace: Path) -> None:
    reg = make_registry(workspace, "namespaces")
    out = run(reg, "run_shell", argv=["cat", "/proc/net/dev"])
    interfaces = [line.split(":")[0].strip() for line in out["stdout"].splitlines()[2:]]
    assert interfaces == ["lo"]
    code = "import socket, fcntl, struct\n" + (
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "req = struct.pack('16sh', b'lo', 0)\n"
        "print(struct.unpack('16sh', fcntl.ioctl(s, 0x8913, req))[1] & 1)\n"  # SIOCGIFFLAGS, UP
    )
    assert run(reg, "run_python", code=code)["stdout"] == "0\n"


@pytest.mark.parametrize("mode", ["namespaces", "none"])
def test_temporary_files_stay_in_the_call(workspace: Path, mode: str) -> None:
    reg = make_registry(workspace, mode)
    name = f"left-{uuid.uuid4().hex}"
    places = [Path(d) / name for d in ("/tmp", "/var/tmp", "/dev/shm")]
    script = " && ".join(f"echo x > {p} && cat {p}" for p in places)
    try:
        out = run(reg, "run_shell_script", script=script)
        python_out = run(reg, "run_python", code=f"open('/tmp/{name}.py', 'w').write('x')")
        assert out["stdout"] == "x\n" * 3 and out["exit_code"] == 0
        assert python_out["exit_code"] == 0
        left = [p for p in [*places, Path(f"/tmp/{name}.py")] if p.exists()]
        if mode == "namespaces":
            assert left == []
        else:
            assert len(left) == 4
    finally:
        for path in [*places, Path(f"/tmp/{name}.py")]:
            path.unlink(missing_ok=True)


def test_scratch_and_workspace_inside_the_private_tmp(workspace: Path) -> None:
    """TMPDIR is in the call's tmpfs; a workspace under /tmp is still the host's directory."""
    assert str(workspace).startswith("/tmp/")
    (workspace / "input.txt").write_text("from the host\n")
    reg = make_registry(workspace, "namespaces")
    code = "import os\nprint(open('input.txt').read().strip(), os.environ['TMPDIR'])"
    out = run(reg, "run_python", code=code)
    text, tmpdir = out["stdout"].split()[:-1], out["stdout"].split()[-1]
    assert " ".join(text) == "from the host" and tmpdir.startswith("/tmp/toolq-sandbox-")
    df = run(reg, "run_shell_script", script='stat -f -c %T "$TMPDIR"; stat -f -c %T .')
    on_host = subprocess.run(["stat", "-f", "-c", "%T", workspace], capture_output=True, text=True)
    assert on_host.stdout != "tmpfs\n"
    assert df["stdout"] == "tmpfs\n" + on_host.stdout  # the scratch in the tmpfs, the workspace not


@pytest.mark.parametrize("mode", ["namespaces", "none"])
def test_proc_shows_only_the_sandbox(workspace: Path, mode: str) -> None:
    marker = f"300.{str(uuid.uuid4().int)[:12]}"
    host = subprocess.Popen(["sleep", marker])  # a host process whose command line must not leak
    try:
        reg = make_registry(workspace, mode)
        if mode == "none":
            # The control: without isolation the host process is there. Only it is listed, as a
            # busy host's whole process list would pass the output cap and hide it.
            ps = run(reg, "run_shell", argv=["ps", "-o", "pid,user,args", "-p", str(host.pid)])
            code = f"print(open('/proc/{host.pid}/cmdline', 'rb').read())\n"
        else:
            ps = run(reg, "run_shell", argv=["ps", "-eo", "pid,user,args"])
            code = (
                "import os\n"
                "for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):\n"
                "    print(pid, open(f'/proc/{pid}/cmdline', 'rb').read())\n"
                f"try:\n    print(open('/proc/{host.pid}/cmdline', 'rb').read())\n"
                "except OSError as exc:\n    print('hidden', exc.errno)\n"
            )
        listing = run(reg, "run_python", code=code)
    finally:
        host.kill()
        host.wait()
    if mode == "none":
        assert marker in ps["stdout"] and marker in listing["stdout"]
        return
    assert marker not in ps["stdout"] and marker not in listing["stdout"]
    pids = [line.split()[0] for line in ps["stdout"].splitlines()[1:]]
    assert pids == ["1", "2"]  # the namespace's init and ps itself
    lines = listing["stdout"].splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["1", "2"]
    assert lines[-1] == "hidden 2"


def test_tmp_bytes_caps_the_private_tmpfs(workspace: Path) -> None:
    reg = make_registry(workspace, "namespaces", tmp_bytes=2 << 20)
    code = (
        "import os\n"
        "def fill(path, size):\n"
        "    try:\n"
        "        with open(path, 'wb') as f:\n"
        "            f.write(b'x' * size)\n"
        "        return 'ok'\n"
        "    except OSError as exc:\n"
        "        return exc.strerror\n"
        "print(fill('/tmp/big', 8 << 20), os.path.getsize('/tmp/big') <= 2 << 20)\n"
        "os.unlink('/tmp/big')\n"
        "print(fill('/tmp/half', 1536 << 10), fill('/dev/shm/half', 1536 << 10))\n"
    )
    out = run(reg, "run_python", code=code)
    assert out["stdout"] == "No space left on device True\nok No space left on device\n"


def test_isolation_is_spelled_out() -> None:
    with pytest.raises(ConfigurationError, match="isolation must be"):
        shell(root="/", isolation="off")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="cannot be '/tmp' itself"):
        python(root="/tmp")  # it would be the call's private /tmp, not the host's


def _without_sys_admin() -> list[str]:
    """Run as root without CAP_SYS_ADMIN, as in a default container: unshare is refused."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    return [setpriv, "--bounding-set=-sys_admin"]


def test_a_call_fails_closed_where_namespaces_are_refused(workspace: Path) -> None:
    os.chown(workspace, 65534, 65534)  # the command could leave a mark here if it ran
    program = (
        "import sys\n"
        "from toolq import ToolRegistry\n"
        "from toolq.builtins import shell\n"
        "reg = ToolRegistry()\n"
        f"reg.include(shell(root={str(workspace)!r}))\n"
        "result = reg.invoke('run_shell', {'argv': ['touch', 'ran']})\n"
        "print(result.status.value, result.error)\n"
    )
    done = subprocess.run(
        [*_without_sys_admin(), sys.executable, "-c", program],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.startswith("failed sandbox could not start 'touch': could not create")
    assert "Operation not permitted" in done.stdout and "isolation='none'" in done.stdout
    assert not (workspace / "ran").exists()


def test_worker_refuses_to_start_without_namespaces(settings: Settings, workspace: Path) -> None:
    env = {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "TOOLQ_APP": "tests.builtins.app:registry",
        "TOOLQ_BUILTINS_ROOT": str(workspace),
        "PYTHONPATH": str(ROOT),
    }
    argv = [*_without_sys_admin(), sys.executable, "-m", "toolq", "worker", "--risk", "dangerous"]
    argv += ["--pool", "threads", "--concurrency", "1"]
    refused = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "the sandbox cannot isolate commands on this host" in refused.stderr
    assert "Operation not permitted" in refused.stderr
    assert "isolation='none'" in refused.stderr
    assert missing_queues(settings, [RiskLevel.DANGEROUS]) != []  # it never registered

    # the same host with the explicit opt-out: the worker starts
    env["TOOLQ_BUILTINS_ISOLATION"] = "none"
    worker = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True)
    try:
        import time

        deadline = time.monotonic() + 30
        while missing_queues(settings, [RiskLevel.DANGEROUS]):
            assert worker.poll() is None, f"worker exited with {worker.returncode}"
            assert time.monotonic() < deadline, "worker did not come up"
            time.sleep(0.1)
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(15)
