"""Where a toolq worker's CPU goes per call: py-spy samples of every worker process in a batch.

A default ``toolq worker`` (prefork, one process per core) takes no-op batches back to back
while ``py-spy record --subprocesses --gil --nonblocking --format raw`` samples it: only
threads holding the GIL, i.e. running Python, not waiting for Redis's replies. The worker's
CPU per call comes from the process tree's CPU times; each part's share of the samples
splits it. Needs ``py-spy`` (``pip install py-spy``) and ptrace rights.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.probes.redis_cost import tree_cpu_s

RATE = 400
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::\d+)?\)$")


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    return found


def _where(path: str) -> str:
    """The package a frame's file belongs to (toolq modules by name)."""
    m = re.search(r"(?:^|/)toolq/(.+)\.py$", path)
    if m:
        return "toolq." + m.group(1).replace("/", ".")
    for pkg in ("celery", "kombu", "billiard", "redis", "pydantic", "pydantic_core", "vine",
                "amqp", "opentelemetry", "json", "logging", "threading", "socket", "selectors",
                "asyncio", "uuid", "ssl"):  # fmt: skip
        if path.startswith(f"{pkg}/") or f"/{pkg}/" in path or path == f"{pkg}.py":
            return pkg
    return Path(path).name


def parse(raw: str) -> dict[str, Any]:
    """Leaf package, inclusive toolq function and process shares of py-spy's raw samples."""
    leaf: Counter[str] = Counter()
    leaf_func: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    process: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        # py-spy names each process in the chain: two "process" frames = a pool child.
        process["pool" if sum(f.startswith("process ") for f in frames) > 1 else "main"] += n
        parsed = [m for f in frames if (m := _FRAME.match(f))]
        if parsed:
            leaf[_where(parsed[-1]["file"])] += n
            leaf_func[f"{parsed[-1]['func']} ({parsed[-1]['file']})"] += n
        seen = set()
        for m in parsed:
            where = _where(m["file"])
            if where.startswith("toolq.") and not where.startswith(("toolq.cli", "toolq.__")):
                seen.add(f"{where}.{m['func']}")
        for name in seen:
            inclusive[name] += n
    return {"samples": total, "leaf": leaf, "leaf_func": leaf_func, "inclusive": inclusive,
            "process": process}  # fmt: skip


def profile(run: Any) -> dict[str, Any]:
    """Sample a default toolq worker through back-to-back batches for ``--profile-seconds``."""
    import os

    from bench.peers.setups import toolq

    a = run.args
    spy = _py_spy()
    cores = os.cpu_count() or 1
    out_file = run.log("profile").with_suffix(".raw.txt")
    with toolq("prefork", cores)(run.procs, a.redis_url, run.log("profile")) as side:
        for _ in range(20):
            side.round_trip()
        side.batch(min(a.batch, 500), a.batch_timeout)  # pool processes warm
        argv = [spy, "record", "--pid", str(side.proc.pid), "--subprocesses", "--gil",
                "--nonblocking", "--rate", str(RATE), "--format", "raw", "--output", str(out_file),
                "--duration", str(int(a.profile_seconds))]  # fmt: skip
        spy_proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attaches
        cpu0, calls, t0 = tree_cpu_s(side.proc.pid), 0, time.monotonic()
        while time.monotonic() - t0 < a.profile_seconds - 2.0:
            side.batch(a.batch, a.batch_timeout)
            calls += a.batch
        cpu_s = tree_cpu_s(side.proc.pid) - cpu0
        _, err = spy_proc.communicate(timeout=a.profile_seconds + 60)
        if spy_proc.returncode or not out_file.exists():
            raise RuntimeError(f"py-spy failed ({spy_proc.returncode}): {err.decode()[-500:]}")
    got = parse(out_file.read_text())
    got["calls"] = calls
    got["worker_cpu_us_per_call"] = cpu_s * 1e6 / calls if calls else 0.0
    got["raw_file"] = str(out_file)
    return got


def print_profile(report: dict[str, Any]) -> None:
    """Worker CPU per call, split by where the samples' innermost frames were."""
    from bench.tables import heading

    total = report["samples"] or 1
    per = report["worker_cpu_us_per_call"]
    heading(
        f"Where toolq worker CPU goes: {per:.0f} µs per no-op call "
        f"({report['calls']} calls, {report['samples']} py-spy samples at {RATE}/s)"
    )
    print("innermost frame in (self):")
    for name, n in Counter(report["leaf"]).most_common(14):
        print(f"  {name:<44}{n / total:>6.1%}{n / total * per:>8.0f} µs/call")
    print("innermost function (self):")
    for name, n in Counter(report["leaf_func"]).most_common(12):
        print(f"  {name[:70]:<72}{n / total:>6.1%}{n / total * per:>8.0f} µs/call")
    print("inclusive, toolq functions:")
    for name, n in Counter(report["inclusive"]).most_common(18):
        print(f"  {name[:70]:<72}{n / total:>6.1%}{n / total * per:>8.0f} µs/call")
    print("by process: " + ", ".join(f"{k} {v / total:.0%}" for k, v in report["process"].items()))
