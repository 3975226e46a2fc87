"""Where Redis's CPU goes on the agent workload: ``perf record`` of the ``redis-server``.

```bash
python -m bench.probes.redis_profile                              # toolq threads -c 8
python -m bench.probes.redis_profile --systems toolq-threads,dramatiq-default --seconds 6
```

Starts a private ``redis-server`` (as ``bench.agent``), and for each system (a
``bench.agent`` config key) runs its 32 conversations for long enough while ``perf record
--call-graph dwarf`` samples the server alone, then prints the share of the server's CPU
spent inclusively in each part: scripts (``evalGenericCommand``) and within them the
commands they issue (``luaRedisGenericCommand``), the ``KEYS``/``ARGV`` tables
(``luaSetGlobalArray``) and the rest (the Lua code itself); commands sent directly; replies
(``writeToClient``); reading requests; allocation (``malloc``/``free``, any caller); and the
Redis CPU per call and the commands per call of the run. Needs ``perf`` and the rights to
profile a process of the same user (``kernel.perf_event_paranoid`` ≤ 2).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from bench.agent import Outcome, configs, run_config
from bench.procs import Procs
from toolq.cli.stack import EmbeddedRedis

PARTS = (
    ("scripts (EVALSHA)", "evalGenericCommand"),
    ("  commands they issue", "luaRedisGenericCommand"),
    ("  KEYS/ARGV tables", "luaSetGlobalArray"),
    ("  Lua table/string work", "luaH_resize luaS_newlstr luaH_getstr luaH_get"),
    ("  Lua garbage collector", "luaC_step"),
    ("replies (writeToClient)", "writeToClient"),
    ("reading requests", "readQueryFromClient"),
    ("malloc/free, any caller", "__GI___libc_malloc __GI___libc_free __GI___libc_realloc"),
    ("key lookups (dictFind)", "dictFind"),
    ("all commands (call)", "call"),
)
"""Each part: its label and the functions whose inclusive shares it sums."""


def inclusive_shares(data: Path) -> dict[str, float]:
    """Each function's inclusive share (%) of the samples in ``data``."""
    report = subprocess.run(
        [
            *("perf", "report", "-i", str(data), "--children"),
            *("--sort", "symbol", "--stdio", "-g", "none"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shares: dict[str, float] = {}
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+[\d.]+%\s+\[[.k]\]\s+(\S+)", line)
        if m:
            shares.setdefault(m.group(2), float(m.group(1)))
    return shares


def profile(key: str, seconds: float, turns: int, out: Path) -> None:
    """Run ``key``'s config on a fresh server and profile the server ``seconds`` long."""
    [config] = [c for c in configs(psutil.cpu_count() or 1) if c.key == key]
    server = EmbeddedRedis(appendonly=False)
    server.start()
    assert server.process is not None
    procs, logs = Procs(), Path(tempfile.mkdtemp(prefix="redis-profile-"))
    data = out / f"{key}.data"
    results: dict[int, object] = {}
    runner = threading.Thread(
        target=lambda: results.update(run_config(config, procs, server.url, logs, [32], turns))
    )
    try:
        runner.start()
        time.sleep(6)  # the workers up and the warm-up turns done
        subprocess.run(
            [
                *("perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,16384"),
                *("-p", str(server.process.pid), "-o", str(data), "--", "sleep", str(seconds)),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        runner.join()
    finally:
        procs.stop_all()
        server.stop()
    outcome = results.get(32)
    shares = inclusive_shares(data)
    print(f"## {config.label}, 32 conversations")
    if isinstance(outcome, Outcome):
        print(
            f"  {outcome.calls_per_s:,.0f} calls/s; Redis CPU "
            f"{outcome.per_call_us(outcome.cpu_redis_s):.0f} µs/call, "
            f"{outcome.redis_commands / max(outcome.calls, 1):.1f} commands/call"
        )
    else:
        print(f"  {outcome}")
    print("  share of the server's CPU, inclusive:")
    for label, names in PARTS:
        share = sum(shares.get(name, 0.0) for name in names.split())
        print(f"  {label:<28} {share:5.1f}%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="toolq-threads")
    parser.add_argument("--seconds", type=float, default=5.0, help="of perf sampling")
    parser.add_argument("--turns", type=int, default=600, help="per conversation")
    args = parser.parse_args(argv)
    if shutil.which("perf") is None:
        print("perf is not installed", file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix="redis-perf-"))
    print(f"# python -m bench.probes.redis_profile {' '.join(argv or sys.argv[1:])}")
    print(f"# {os.cpu_count()} cores; perf data in {out}")
    for key in args.systems.split(","):
        profile(key, args.seconds, args.turns, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
