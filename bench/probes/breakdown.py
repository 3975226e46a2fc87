"""Where a toolq call's Redis commands go: ``MONITOR`` while calls run, attributed per phase.

One ``toolq worker`` (prefork, one process per core) is warmed up; then ``MONITOR`` records
(1) ``--breakdown-calls`` single calls (20), each ``dispatch`` then ``wait``, (2) one batch of
``--breakdown-batch`` calls (200), (3) the idle worker for ``--breakdown-idle`` seconds (10).
Every command is attributed by the TCP port of its connection to a process (this client, the
worker's main process — Celery's consumer and toolq's maintenance thread — or a pool process),
the client's to ``dispatch`` or ``wait`` by when ``dispatch`` returned, and the commands a Lua
script issues (MONITOR's ``lua`` lines, which follow their ``EVALSHA``) to that script, named
from the scripts toolq ships.
"""

from __future__ import annotations

import hashlib
import importlib
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import redis

from bench.probes.memory import shape

SENTINEL = "bench-breakdown-stop"
UNWATCHED = ("toolq.api", "toolq.integrations")
"""Packages neither process under MONITOR (the worker, the bench's own client) runs, and
which hold no script: importing them (FastAPI, MCP, the agent frameworks) cost 2.2 of the
4 CPU seconds of naming the scripts, up to 80 s of wall time on a loaded machine."""
_KEYLESS = {"MULTI", "EXEC", "HELLO", "SCRIPT", "CLIENT", "PING", "TIME", "EVALSHA", "EVAL",
            "PUBLISH", "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE", "INFO", "SELECT"}  # fmt: skip


def script_names() -> dict[str, str]:
    """sha1 -> name of every Lua script in the toolq package (string constants, ``.lua`` files)."""
    import toolq

    names: dict[str, str] = {}
    root = Path(toolq.__file__).parent
    # Every module file: some subpackages are namespace packages, which pkgutil does not walk.
    for path in sorted(root.rglob("*.py")):
        name = ".".join(("toolq", *path.relative_to(root).with_suffix("").parts))
        name = name.removesuffix(".__init__")
        if name.endswith("__main__"):  # importing it would run the CLI
            continue
        if name.startswith(UNWATCHED):
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # optional extras (api, mcp...) may be missing: their scripts too
            continue
        for attr, value in vars(module).items():
            sha = getattr(value, "sha", None)  # toolq's own Script wrappers carry their SHA-1
            if isinstance(sha, str) and len(sha) == 40 and not isinstance(value, type):
                names.setdefault(sha, f"{attr.strip('_')} ({name.split('.')[-1]})")
            if isinstance(value, str) and "redis.call(" in value:
                digest = hashlib.sha1(value.encode()).hexdigest()
                names.setdefault(digest, f"{attr.strip('_')} ({name.split('.')[-1]})")
            script = getattr(value, "script", None)  # redis-py Script objects
            if isinstance(script, str | bytes) and b"redis.call(" in _b(script):
                names.setdefault(hashlib.sha1(_b(script)).hexdigest(), attr.strip("_"))
    for path in root.rglob("*.lua"):
        names.setdefault(hashlib.sha1(path.read_bytes()).hexdigest(), path.stem)
    # kombu's Redis transport has Lua of its own (restoring unacked messages).
    import kombu.transport.redis as transport

    for attr, value in vars(transport).items():
        if isinstance(value, str) and "redis.call(" in value:
            names.setdefault(hashlib.sha1(value.encode()).hexdigest(), f"kombu {attr.strip('_')}")
    return names


def _b(text: str | bytes) -> bytes:
    return text.encode() if isinstance(text, str) else text


def port_roles(worker_pid: int) -> dict[str, str]:
    """Local TCP port -> "client" / "worker main" / "worker pool" for connections to Redis.

    A pool process inherits the sockets its parent opened before the fork, so a port
    keeps the first owner found: the client, then the main process, then the pool.
    """
    import os

    import psutil  # type: ignore[import-untyped]

    roles: dict[str, str] = {}
    main = psutil.Process(worker_pid)
    for proc, role in [
        (psutil.Process(os.getpid()), "client"),
        (main, "worker main"),
        *((child, "worker pool") for child in main.children(recursive=True)),
    ]:
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.laddr:
                    roles.setdefault(str(conn.laddr.port), role)
        except psutil.Error:
            continue
    return roles


class Capture:
    """``MONITOR`` in a thread until the sentinel ``ECHO``; the parsed lines."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.lines: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Capture:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        client = redis.Redis.from_url(self.url)
        client.echo(SENTINEL)
        client.close()
        self.thread.join(30)

    def _run(self) -> None:
        client = redis.Redis.from_url(self.url)
        with client.monitor() as m:  # type: ignore[no-untyped-call]
            self.ready.set()
            for line in m.listen():
                if SENTINEL in line["command"]:
                    break
                self.lines.append(line)
        client.close()


def attribute(
    lines: list[dict[str, Any]], roles: dict[str, str], scripts: dict[str, str], mark: float
) -> dict[str, Any]:
    """Count each command under (process/phase, operation); a script's inner ones under it."""
    ops: Counter[tuple[str, str]] = Counter()
    inner: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    current: tuple[str, str] | None = None
    for line in lines:
        words = line["command"].split(" ", 2)
        name = words[0].upper()
        # The command and the shape of its first key: "ZADD toolq:calls:recent".
        keyed = f"{name} {shape(words[1])}" if len(words) > 1 and name not in _KEYLESS else name
        if line["client_type"] == "lua":
            if current is not None:
                inner[current][keyed] += 1
            continue
        role = roles.get(str(line["client_port"]), "other")
        if role == "client":
            role = "client dispatch" if line["time"] < mark else "client wait"
        if name in ("EVALSHA", "EVAL") and len(words) > 1:
            sha = words[1] if name == "EVALSHA" else hashlib.sha1(words[1].encode()).hexdigest()
            op = "script " + scripts.get(sha.lower(), sha[:10])
        else:
            op = keyed
        current = (role, op)
        ops[current] += 1
    return {"ops": ops, "inner": inner}


def _table(got: dict[str, Any], per: float) -> list[dict[str, Any]]:
    rows = []
    for (role, op), n in got["ops"].items():
        inner = got["inner"].get((role, op), Counter())
        rows.append(
            {
                "where": role,
                "op": op,
                "per_call": n / per,
                "inner_per_call": {k: round(v / per, 2) for k, v in inner.most_common()},
                "total_per_call": (n + sum(inner.values())) / per,
            }
        )
    return sorted(rows, key=lambda r: (r["where"], -r["total_per_call"]))


def breakdown(run: Any) -> dict[str, Any]:
    """MONITOR single calls, a batch and the idle worker of a default toolq worker."""
    import os

    from bench.peers.setups import toolq

    a = run.args
    scripts = script_names()
    cores = os.cpu_count() or 1
    out: dict[str, Any] = {"worker": f"toolq worker --pool prefork -c {cores}"}
    with toolq("prefork", cores)(run.procs, a.redis_url, run.log("breakdown")) as side:
        for _ in range(20):
            side.round_trip()
        client, pid = side.client, side.proc.pid

        def calls(n: int) -> Any:
            payload = [{"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}}
                       for _ in range(n)]  # fmt: skip
            start = time.time()
            batch = client.dispatch(payload)
            mark = time.time()
            batch.wait(timeout=a.batch_timeout)
            return start, mark

        marks: list[tuple[float, float]] = []
        with Capture(a.redis_url) as cap:
            for _ in range(a.breakdown_calls):
                marks.append(calls(1))
        roles = port_roles(pid)
        single = _split(cap.lines, marks, roles, scripts)
        out["single"] = {"calls": a.breakdown_calls, "rows": _table(single, a.breakdown_calls)}
        with Capture(a.redis_url) as cap:
            _, mark = calls(a.breakdown_batch)
        roles.update(port_roles(pid))
        out["batch"] = {
            "calls": a.breakdown_batch,
            "rows": _table(attribute(cap.lines, roles, scripts, mark), a.breakdown_batch),
        }
        with Capture(a.redis_url) as cap:
            time.sleep(a.breakdown_idle)
        roles.update(port_roles(pid))
        idle = attribute(cap.lines, roles, scripts, 0.0)
        out["idle"] = {"seconds": a.breakdown_idle, "rows": _table(idle, a.breakdown_idle)}
    return out


def _split(
    lines: list[dict[str, Any]],
    marks: list[tuple[float, float]],
    roles: dict[str, str],
    scripts: dict[str, str],
) -> dict[str, Any]:
    """Attribute sequential calls: (dispatch start, dispatch returned) of each splits the lines."""
    ops: Counter[tuple[str, str]] = Counter()
    inner: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    start = 0
    for i, (_, mark) in enumerate(marks):
        # A call's lines run until the next call's dispatch starts.
        end_time = marks[i + 1][0] if i + 1 < len(marks) else float("inf")
        chunk = []
        while start < len(lines) and lines[start]["time"] < end_time:
            chunk.append(lines[start])
            start += 1
        got = attribute(chunk, roles, scripts, mark)
        ops.update(got["ops"])
        for k, v in got["inner"].items():
            inner[k].update(v)
    return {"ops": ops, "inner": inner}


def print_breakdown(report: dict[str, Any]) -> None:
    """The per-call tables of each capture."""
    from bench.tables import heading

    heading(f"Where a toolq call's Redis commands go (MONITOR; {report['worker']})")
    for phase, unit in (("single", "call"), ("batch", "call"), ("idle", "second")):
        got = report[phase]
        n = got.get("calls", got.get("seconds"))
        rows = got["rows"]
        total = sum(r["total_per_call"] for r in rows)
        print(f"\n{phase}: {n} {unit}s; {total:.1f} commands per {unit}")
        print(f"{'where':<16}{'operation':<42}{'per ' + unit:>9}{'+inner':>8}  inner commands")
        for r in rows:
            if r["total_per_call"] < 0.05:
                continue
            inner_n = r["total_per_call"] - r["per_call"]
            inner = ", ".join(f"{k} {v:g}" for k, v in r["inner_per_call"].items())
            print(f"{r['where']:<16}{r['op'][:41]:<42}{r['per_call']:>9.2f}"
                  f"{inner_n:>8.2f}  {inner}")  # fmt: skip
