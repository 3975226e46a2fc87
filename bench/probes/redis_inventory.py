"""Every Redis command one call of the agent workload costs, by script and by command.

One conversation (turns of 1, 2, 3 no-op calls, as ``bench.agent``) against a ``toolq worker``
on a private Redis. Two phases of the same turns:

- ``MONITOR`` (its own overhead makes the CPU figures of this phase meaningless): every command
  a client sent, and every one a Lua script issued under it, grouped by the script (named by
  its SHA1) or by the client command, per call;
- ``INFO commandstats`` deltas without ``MONITOR``: the commands and the µs Redis spent on each
  per call, and the server's CPU per call;
- a ``SLOWLOG`` of every command: µs per script (wall time: on a loaded machine, not CPU).

``python -m bench.probes.redis_inventory [--turns 60] [--pool threads] [--concurrency 8]``
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

import redis

from bench.agent import calls_in_turn
from bench.peers.toolq_side import ToolqWorker
from bench.probes.redis_cost import private_redis
from bench.procs import Procs
from toolq.results.scripts import ALL

SCRIPT_NAMES = {script.sha: script.name for script in ALL}


def run_turns(side: ToolqWorker, turns: int) -> int:
    """``turns`` turns of one conversation; the calls made."""
    calls = 0
    for k in range(turns):
        n = calls_in_turn(k)
        payload = [
            {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}} for _ in range(n)
        ]
        side.client.dispatch(payload).wait(timeout=30)
        calls += n
    return calls


def monitored(url: str, run: Any) -> tuple[Any, list[str]]:
    """``run()`` under ``MONITOR``; its result and the monitor's lines."""
    lines: list[str] = []
    stop = threading.Event()
    client = redis.Redis.from_url(url)

    def watch() -> None:
        with client.monitor() as m:
            for event in m.listen():
                lines.append(f"{event['client_address']} {event['command']}")
                if stop.is_set():
                    return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    time.sleep(0.3)
    out = run()
    time.sleep(0.3)
    stop.set()
    redis.Redis.from_url(url).ping()
    thread.join(5)
    return out, lines


def named(words: list[str]) -> str:
    """``script <name>`` for a script's ``EVALSHA``, else ``cmd <COMMAND>``."""
    verb = words[0].upper()
    if verb in ("EVALSHA", "EVAL") and len(words) > 1:
        return "script " + SCRIPT_NAMES.get(words[1], words[1][:8])
    return "cmd " + verb


def grouped(lines: list[str]) -> dict[str, Counter[str]]:
    """Commands by the client command or script they ran under."""
    by: dict[str, Counter[str]] = defaultdict(Counter)
    current = ""
    for line in lines:
        address, _, command = line.partition(" ")
        words = command.split(" ")
        verb = words[0].upper()
        if address == "lua":
            by[current][verb] += 1
            continue
        current = named(words)
        by[current]["(the call itself)"] += 1
    return by


def commandstats(client: redis.Redis) -> tuple[float, dict[str, tuple[int, int]]]:
    cpu: Any = client.info("cpu")
    stats: Any = client.info("commandstats")
    return (
        float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
        {
            k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for k, v in stats.items()
            if k != "cmdstat_info"
        },
    )


def slowlogged(
    client: redis.Redis, side: ToolqWorker, turns: int
) -> dict[str, tuple[float, float]]:
    """Per script or command: invocations and µs per call, from a ``SLOWLOG`` of everything."""
    client.config_set("slowlog-max-len", 100_000)
    client.slowlog_reset()
    client.config_set("slowlog-log-slower-than", 0)
    calls = run_turns(side, turns)
    client.config_set("slowlog-log-slower-than", 10_000)
    entries: Any = client.slowlog_get(100_000)
    by: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for entry in entries:
        command = entry["command"]
        what = named((command.decode() if isinstance(command, bytes) else str(command)).split(" "))
        by[what][0] += 1
        by[what][1] += int(entry["duration"])
    return {
        k: (n / calls, us / calls)
        for k, (n, us) in by.items()
        if not k.startswith("cmd SLOWLOG") and not k.startswith("cmd CONFIG")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    procs = Procs()
    with (
        private_redis() as server,
        ToolqWorker(procs, server.url, pool=args.pool, concurrency=args.concurrency) as side,
    ):
        run_turns(side, 6)  # warm: scripts loaded, connections open
        calls, lines = monitored(server.url, lambda: run_turns(side, args.turns))
        print(f"# MONITOR: {calls} calls, {args.turns} turns, pool {args.pool}")
        by = grouped(lines)
        total = 0
        for what, counts in sorted(by.items(), key=lambda kv: -sum(kv[1].values())):
            n = sum(counts.values())
            total += n
            inner = ", ".join(f"{k} {v / calls:.2f}" for k, v in counts.most_common())
            print(f"{n / calls:6.2f}/call  {what}: {inner}")
        print(f"{total / calls:6.2f}/call  total")
        watch = redis.Redis.from_url(server.url)
        cpu0, stats0 = commandstats(watch)
        calls = run_turns(side, args.turns)
        cpu1, stats1 = commandstats(watch)
        print(
            f"\n# commandstats: {calls} calls; Redis CPU {(cpu1 - cpu0) * 1e6 / calls:.0f} µs/call"
        )
        rows = []
        for name, (n1, us1) in stats1.items():
            n0, us0 = stats0.get(name, (0, 0))
            if n1 > n0:
                rows.append((name, (n1 - n0) / calls, (us1 - us0) / calls))
        for name, n, us in sorted(rows, key=lambda r: -r[2]):
            print(f"{name:18} {n:6.2f}/call {us:7.1f} µs/call")
        print(f"{'total':18} {sum(r[1] for r in rows):6.2f}/call")
        print("(evalsha's µs include those of the commands its scripts issued)")
        slow = slowlogged(watch, side, args.turns)
        print("\n# SLOWLOG (every command's own µs; a script's include its inner commands)")
        for what, (n, us) in sorted(slow.items(), key=lambda kv: -kv[1][1]):
            print(f"{what:24} {n:6.2f}/call {us:7.1f} µs/call {us / n:7.1f} µs each")
    procs.stop_all()


if __name__ == "__main__":
    main()
