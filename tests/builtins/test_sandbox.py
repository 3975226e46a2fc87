"""shell() and python(): argv without a shell, limits, process-tree cleanup, environment."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.builtins.helpers import live_processes, private_uid
from toolq import CallStatus, ToolContext, ToolRegistry
from toolq.builtins import SandboxLimits, python, shell

ROOT_USER = os.geteuid() == 0
ISOLATION = "namespaces" if ROOT_USER else "none"  # namespaces need CAP_SYS_ADMIN


def unique_digits() -> str:
    return str(uuid.uuid4().int)[:12]


def make_registry(workspace: Path, **limits: Any) -> ToolRegistry:
    reg = ToolRegistry()
    sandbox_limits = SandboxLimits(**{"timeout": 10, **limits})
    reg.include(shell(root=workspace, allow_shell=True, limits=sandbox_limits, isolation=ISOLATION))
    reg.include(python(root=workspace, limits=sandbox_limits, isolation=ISOLATION))
    return reg


def run(reg: ToolRegistry, name: str, events: list[Any] | None = None, **args: Any) -> Any:
    ctx = ToolContext(progress_sink=events.append if events is not None else None)
    result = reg.invoke(name, args, context=ctx)
    assert result.status is CallStatus.SUCCEEDED, result.error
    return result.output


def test_toolkits_and_risks(workspace: Path) -> None:
    assert [t.name for t in shell(root=workspace)] == ["run_shell"]
    tools = shell(root=workspace, allow_shell=True) + python(root=workspace)
    assert [(t.name, t.risk.value) for t in tools] == [
        ("run_shell", "dangerous"),
        ("run_shell_script", "dangerous"),
        ("run_python", "dangerous"),
    ]


def test_output_exit_code_and_streamed_progress(workspace: Path) -> None:
    reg = make_registry(workspace)
    (workspace / "data.txt").write_text("hello from the workspace\n")
    events: list[Any] = []
    out = run(reg, "run_shell", events, argv=["sh", "-c", "cat data.txt; echo oops >&2; exit 3"])
    assert out["exit_code"] == 3
    assert out["stdout"] == "hello from the workspace\n" and out["stderr"] == "oops\n"
    assert out["timed_out"] is False and out["truncated"] is False
    assert out["duration_ms"] >= 0
    assert {"stream": "stdout", "text": "hello from the workspace\n"} in events
    assert {"stream": "stderr", "text": "oops\n"} in events


@pytest.mark.parametrize(
    "payload", ["; touch {m}", "$(touch {m})", "`touch {m}`", "| touch {m}", "&& touch {m}"]
)
def test_shell_metacharacters_are_inert_in_argv(workspace: Path, payload: str) -> None:
    reg = make_registry(workspace)
    marker = Path("/tmp") / f"pwned-{uuid.uuid4().hex}"
    text = payload.format(m=marker)
    out = run(reg, "run_shell", argv=["echo", text])
    assert out["stdout"] == text + "\n"
    out = run(reg, "run_shell", argv=["ls", text])
    assert out["exit_code"] != 0
    assert not marker.exists()


def test_unknown_program_is_a_clear_error(workspace: Path) -> None:
    reg = make_registry(workspace)
    result = reg.invoke("run_shell", {"argv": ["definitely-not-a-program-xyz"]})
    assert result.status is CallStatus.FAILED
    assert "definitely-not-a-program-xyz" in (result.error or "")


def test_allowed_commands_and_cwd_jail(workspace: Path) -> None:
    reg = ToolRegistry()
    reg.include(shell(root=workspace, allowed_commands=["echo"], isolation=ISOLATION))
    assert reg.invoke("run_shell", {"argv": ["echo", "hi"]}).ok
    refused = reg.invoke("run_shell", {"argv": ["rm", "-rf", "x"]})
    assert refused.status is CallStatus.FAILED and "not allowed" in (refused.error or "")
    escape = reg.invoke("run_shell", {"argv": ["echo"], "cwd": "../.."})
    assert escape.status is CallStatus.FAILED and escape.error_type == "tool_denied"


def test_environment_is_an_allowlist(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLQ_TEST_SECRET", "sk-xyz")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-xyz")
    reg = make_registry(workspace)
    out = run(reg, "run_shell", argv=["env"])
    names = {line.split("=", 1)[0] for line in out["stdout"].splitlines()}
    assert "sk-xyz" not in out["stdout"] and "sk-openai" not in out["stdout"]
    assert names <= {"PATH", "LANG", "HOME", "TMPDIR", "PWD"}
    assert f"HOME={os.path.realpath(workspace)}" in out["stdout"]
    code = "import os; print(os.environ.get('TOOLQ_TEST_SECRET'), os.environ.get('OPENAI_API_KEY'))"
    assert run(reg, "run_python", code=code)["stdout"] == "None None\n"


@pytest.mark.skipif(not ROOT_USER, reason="privilege drop needs root")
def test_runs_unprivileged_when_root(workspace: Path) -> None:
    reg = make_registry(workspace)
    out = run(reg, "run_python", code="import os; print(os.getuid(), os.getgid(), os.getgroups())")
    assert out["stdout"] == "65534 65534 []\n"
    denied = run(reg, "run_shell", argv=["cat", "/etc/shadow"])
    assert denied["exit_code"] != 0 and "Permission denied" in denied["stderr"]
    # the scratch TMPDIR is writable, the (root-owned) workspace is not
    out = run(reg, "run_shell_script", script='echo hi > "$TMPDIR/x" && cat "$TMPDIR/x"; touch w')
    assert out["stdout"] == "hi\n" and "Permission denied" in out["stderr"]


def test_output_is_capped(workspace: Path) -> None:
    reg = make_registry(workspace, output_bytes=1000)
    events: list[Any] = []
    out = run(reg, "run_python", events, code="print('x' * 200_000)\nprint('done')")
    assert out["truncated"] is True and len(out["stdout"]) == 1000
    assert out["exit_code"] == 0
    assert sum(len(e["text"]) for e in events if e["stream"] == "stdout") == 1000


def test_memory_hog_is_contained(workspace: Path) -> None:
    reg = make_registry(workspace, memory_bytes=256 << 20)
    out = run(reg, "run_python", code="x = bytearray(2 << 30)\nprint('allocated')")
    assert out["exit_code"] == 1 and "MemoryError" in out["stderr"]
    assert "allocated" not in out["stdout"]


def test_cpu_limit_kills_a_spinner(workspace: Path) -> None:
    reg = make_registry(workspace, cpu_seconds=1)
    started = time.monotonic()
    out = run(reg, "run_python", code="while True:\n    pass")
    assert out["exit_code"] in (-24, -9)  # SIGXCPU at the soft limit, SIGKILL at the hard
    assert time.monotonic() - started < 8


def test_file_size_limit(workspace: Path) -> None:
    reg = make_registry(workspace, file_size_bytes=1000)
    code = "import os\nwith open(os.environ['TMPDIR'] + '/f', 'wb') as f:\n    f.write(b'x' * 5000)"
    out = run(reg, "run_python", code=code)
    assert out["exit_code"] != 0 and "File too large" in out["stderr"]


def test_fork_bomb_is_contained_and_leaves_nothing(workspace: Path) -> None:
    uid = private_uid()  # a budget of its own: no other sandbox's bomb can spend it
    reg = make_registry(workspace, processes=16, timeout=2, user=uid, group=uid)
    marker = f"bomb-{uuid.uuid4().hex}"
    started = time.monotonic()
    # The outer shell forks once (the bomb, in the background) and then waits in a builtin
    # loop: with the process budget spent, any later fork of its own would fail, and bash
    # gives up on a failed fork (and exits) as soon as a SIGCHLD cuts its retry sleep short.
    out = run(
        reg, "run_shell_script", script=f": {marker}; b() {{ b | b & }}; b & while :; do :; done"
    )
    assert out["timed_out"] is True and out["exit_code"] is None, out
    assert time.monotonic() - started < 10
    assert live_processes(marker) == []
    # the budget is back: the next call can fork normally
    assert run(reg, "run_shell_script", script="echo $(echo ok)")["stdout"] == "ok\n"


def test_python_fork_bomb_is_contained(workspace: Path) -> None:
    uid = private_uid()
    reg = make_registry(workspace, processes=8, timeout=2, user=uid, group=uid)
    marker = f"pybomb-{uuid.uuid4().hex}"
    code = (
        "import os, time\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        time.sleep(0.01)\n"
    )
    out = run(reg, "run_python", code=code, args=[marker])
    assert out["timed_out"] is True
    assert live_processes(marker) == []


def test_timeout_kills_the_whole_tree(workspace: Path) -> None:
    reg = make_registry(workspace)
    tag = unique_digits()
    marker = f"300.{tag}"  # every sleep below runs for 300.<tag> seconds: findable in /proc
    script = (
        f"sleep {marker} &\n"  # a child in the group
        f"sh -c 'sleep {marker} & sleep {marker}' &\n"  # grandchildren
        f"setsid sh -c 'sleep {marker}' &\n"  # one that leaves the process group
        f"(trap '' TERM HUP INT; sleep {marker}) &\n"  # one that ignores polite signals
        "echo started\n"
        f"sleep {marker}\n"
    )
    started = time.monotonic()
    events: list[Any] = []
    out = run(reg, "run_shell_script", events, script=script, timeout=1)
    assert out["timed_out"] is True and out["stdout"] == "started\n"
    assert time.monotonic() - started < 6
    assert {"stream": "stdout", "text": "started\n"} in events
    assert live_processes(marker) == []


def test_background_jobs_do_not_outlive_the_command(workspace: Path) -> None:
    reg = make_registry(workspace)
    marker = f"300.{unique_digits()}"
    started = time.monotonic()
    script = f"(sleep {marker} &); setsid sleep {marker} & echo ok"
    out = run(reg, "run_shell_script", script=script)
    assert out["stdout"] == "ok\n" and out["exit_code"] == 0 and out["timed_out"] is False
    assert time.monotonic() - started < 5
    assert live_processes(marker) == []


def test_cancel_kills_the_tree(workspace: Path) -> None:
    import threading

    reg = make_registry(workspace)
    marker = f"300.{unique_digits()}"
    ctx = ToolContext()
    threading.Timer(0.5, ctx.cancel).start()
    started = time.monotonic()
    result = reg.invoke(
        "run_shell_script", {"script": f"sleep {marker} & sleep {marker}"}, context=ctx
    )
    assert result.status is CallStatus.CANCELLED
    assert time.monotonic() - started < 5
    time.sleep(0.2)
    assert live_processes(marker) == []


def test_python_args_cwd_and_scratch(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The run's scratch directory goes under a temporary directory of this test's own (the
    # sandbox user must reach it, so under /tmp), which must be empty afterwards: other tests
    # and a second copy of the suite make theirs in /tmp at the same time.
    scratch_parent = Path(tempfile.mkdtemp(prefix="toolq-scratch-", dir="/tmp"))
    scratch_parent.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_parent))
    try:
        reg = make_registry(workspace)
        (workspace / "pkg").mkdir()
        (workspace / "pkg" / "input.txt").write_text("42\n")
        code = "import os, sys\nprint(sys.argv[1:], open('input.txt').read().strip(), os.getcwd())"
        out = run(reg, "run_python", code=code, args=["a", "b"], cwd="pkg")
        assert out["stdout"] == f"['a', 'b'] 42 {os.path.realpath(workspace / 'pkg')}\n"
        assert list(scratch_parent.iterdir()) == []
    finally:
        shutil.rmtree(scratch_parent, ignore_errors=True)


def test_worker_death_takes_the_tree_with_it(workspace: Path) -> None:
    import subprocess
    import sys
    import textwrap

    marker = f"300.{unique_digits()}"
    program = textwrap.dedent(f"""
        from toolq import ToolRegistry
        from toolq.builtins import SandboxLimits, shell
        reg = ToolRegistry()
        reg.include(shell(root={str(workspace)!r}, allow_shell=True,
                          limits=SandboxLimits(timeout=60), isolation={ISOLATION!r}))
        reg.invoke("run_shell_script", {{"script": "sleep {marker} & setsid sleep {marker}"}})
    """)
    worker = subprocess.Popen([sys.executable, "-c", program], cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 20
        while len(live_processes(marker, program="sleep")) < 2:
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
    finally:
        worker.kill()
        worker.wait()
    deadline = time.monotonic() + 5
    while live_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_processes(marker) == []
