"""What the listing routes, ``/metrics`` and ``toolq approvals list`` cost with N calls parked.

For each N: a fresh private ``redis-server``, N calls of a DANGEROUS tool parked (in
dispatches of 2,000, over 100 runs), the API served by uvicorn on a free port, then each
route timed over HTTP (median of ``--repeat`` requests, after one warm-up) with its body's
size, and ``toolq approvals list --json`` as a subprocess. Prints a Markdown table.

    python -m bench.probes.listings --parked 200 2000 20000 200000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from toolq import Client, Settings, ToolRegistry
from toolq.api.app import create_app
from toolq.cli.stack import EmbeddedRedis, _free_port
from toolq.models import RiskLevel
from toolq.settings import ApiToken

ROOT = Path(__file__).resolve().parents[2]
registry = ToolRegistry()


@registry.tool(risk=RiskLevel.DANGEROUS)
def wipe(target: str) -> str:
    """A DANGEROUS tool: every call of it is parked."""
    return target


TOKENS = {
    "bench-t": ApiToken(principal="bench", roles=["admin"]),
    # a viewer bound to the tenant the parked calls belong to: its overview counts them
    "tenant-t": ApiToken(principal="viewer", roles=["viewer"], tenant="default"),
}
ROUTES = [
    ("GET /v1/approvals", "/v1/approvals", "bench-t"),
    ("GET /v1/approvals?limit=1000", "/v1/approvals?limit=1000", "bench-t"),
    ("GET /v1/runs", "/v1/runs", "bench-t"),
    ("GET /v1/runs/{id}/calls", "/v1/runs/run-0/calls", "bench-t"),
    ("GET /metrics", "/metrics", "bench-t"),
    ("GET /v1/overview", "/v1/overview", "bench-t"),
    ("GET /v1/overview (tenant-bound viewer)", "/v1/overview", "tenant-t"),
]


def park(client: Client, count: int, runs: int = 100, batch: int = 2000) -> None:
    """``count`` parked calls, spread over ``runs`` runs."""
    per_run = max(1, count // runs)
    made = 0
    while made < count:
        size = min(batch, count - made, per_run - made % per_run)
        run = f"run-{made // per_run}"
        payload = [
            {"id": f"c{made + i}", "name": "wipe", "arguments": {"target": f"/t/{made + i}"}}
            for i in range(size)
        ]
        client.dispatch(payload, run_id=run, principal="agent")
        made += size


@contextmanager
def served(settings: Settings) -> Iterator[str]:
    """The API on a free port, in a thread of this process."""
    port = _free_port()
    app = create_app(settings, registry, tokens=TOKENS)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def median_of(repeat: int, act: Callable[[], int]) -> tuple[float, int]:
    """Median seconds of ``repeat`` runs of ``act`` (after one warm-up) and its last size."""
    act()
    times, size = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        size = act()
        times.append(time.perf_counter() - start)
    return statistics.median(times), size


def measure(parked: int, repeat: int, cli: bool) -> dict[str, tuple[float, int]]:
    """Each route's median time and bytes with ``parked`` calls parked."""
    server = EmbeddedRedis()
    server.start()
    try:
        settings = Settings(redis_url=server.url, app="bench.probes.listings:registry")
        with Client(registry, settings) as client:
            started = time.perf_counter()
            park(client, parked)
            print(f"parked {parked} in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        out: dict[str, tuple[float, int]] = {}
        with served(settings) as url, httpx.Client(base_url=url, timeout=120) as http:
            for name, path, token in ROUTES:

                def get(path: str = path, token: str = token) -> int:
                    got = http.get(path, headers={"Authorization": f"Bearer {token}"})
                    got.raise_for_status()
                    return len(got.content)

                out[name] = median_of(repeat, get)
        if cli:
            env = {**os.environ, "TOOLQ_REDIS_URL": server.url, "PYTHONPATH": str(ROOT)}
            argv = [sys.executable, "-m", "toolq", "approvals", "list", "--json"]

            def run_cli() -> int:
                done = subprocess.run(argv, env=env, capture_output=True, check=True, cwd=ROOT)
                return len(done.stdout)

            out["toolq approvals list --json"] = median_of(repeat, run_cli)
        return out
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parked", type=int, nargs="+", default=[200, 2000, 20000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-cli", action="store_true", help="Skip toolq approvals list.")
    args = parser.parse_args()
    results = {}
    for n in args.parked:
        results[n] = measure(n, args.repeat, not args.no_cli)
        figures = {name: [round(t * 1000, 1), size] for name, (t, size) in results[n].items()}
        print(json.dumps({"parked": n, "ms_and_bytes": figures}), file=sys.stderr, flush=True)
    names = list(next(iter(results.values())))
    print("| route | " + " | ".join(f"{n:,} parked" for n in args.parked) + " |")
    print("|---|" + "---|" * len(args.parked))
    for name in names:
        cells = []
        for n in args.parked:
            seconds, size = results[n][name]
            cells.append(f"{seconds * 1000:,.0f} ms, {_bytes(size)}")
        print(f"| `{name}` | " + " | ".join(cells) + " |")


def _bytes(size: int) -> str:
    if size >= 1_000_000:
        return f"{size / 1_000_000:.1f} MB"
    if size >= 1000:
        return f"{size / 1000:.0f} KB"
    return f"{size} B"


if __name__ == "__main__":
    main()
