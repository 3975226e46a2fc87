"""A private, password-protected ``redis-server`` per session; real worker processes.

The suite never touches a Redis it did not start: by default it starts one on a free port
and removes it afterwards. ``TOOLQ_TEST_REDIS_URL`` opts into another server; the suite then
refuses a database that holds keys it did not write (it marks the databases it uses).
"""

from __future__ import annotations

import base64
import builtins
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

# Imported first on purpose: CPython 3.11.7 can crash at session end ("AST constructor
# recursion depth mismatch") when hypothesis' pytest plugin first imports hypothesis after
# Playwright or the MCP SDK ran in this process.
import hypothesis  # noqa: F401
import pytest
import redis

from toolq import Client, Settings
from toolq.cli.check import missing_queues
from toolq.cli.common import load_registry
from toolq.cli.stack import EmbeddedRedis
from toolq.models import RiskLevel
from toolq.testing import TestWorker

HTTP_TIMEOUT_SECONDS = 30.0
"""How long a test's ``httpx.get``/``post``/... waits for an answer unless it says otherwise.

httpx's default is 5 s; beside a second copy of the suite on two cores an API answer
took longer now and then (a ``ReadTimeout`` in a test that checks what the answer says,
not how fast it comes). Requests that set their own timeout keep it."""


def patient_httpx() -> None:
    """Make the module-level ``httpx`` request functions wait ``HTTP_TIMEOUT_SECONDS``."""
    import functools

    import httpx

    def patient(send: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(send)
        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", HTTP_TIMEOUT_SECONDS)
            return send(*args, **kwargs)

        return call

    for name in ("request", "get", "post", "put", "patch", "delete", "head", "options", "stream"):
        setattr(httpx, name, patient(getattr(httpx, name)))


patient_httpx()


def serialize_compile() -> None:
    """Let one thread at a time build or read a Python syntax tree (``compile``, which
    ``ast.parse`` calls), on CPython 3.11 before 3.11.8.

    Those releases keep the AST constructor's recursion depth in state the whole interpreter
    shares (fixed in 3.11.8). A garbage collection inside the constructor runs finalizers,
    where another thread can take the GIL; if that thread parses too (formatting a traceback
    parses its caret lines: a uvicorn, worker or Playwright thread of a test logging one),
    the first raises ``SystemError: AST constructor recursion depth mismatch``. When the first
    is pytest reporting a failure, the xdist worker dies with INTERNALERROR and the session
    ends there. With the lock, the other thread waits for the tree instead.
    """
    if not (3, 11) <= sys.version_info[:3] < (3, 11, 8):
        return
    compile_, lock = builtins.compile, threading.RLock()

    def serialized(*args: object, **kwargs: object) -> object:
        with lock:
            return compile_(*args, **kwargs)  # type: ignore[call-overload]

    builtins.compile = serialized  # type: ignore[assignment]


serialize_compile()

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = ""
OWNED_MARK = "toolq-test:owned"
"""Key the suite leaves in a database given by ``TOOLQ_TEST_REDIS_URL`` to recognise it."""
SECRETS_KEY = base64.urlsafe_b64encode(os.urandom(32)).decode()
"""The session's ``TOOLQ_SECRETS_KEY``: the whole suite runs with secrets encrypted."""


STARTUP_SECONDS = 60.0
"""How long a test waits for a process it started to come up. A `toolq` process spends 1-2 s
of CPU starting; two copies of the suite on two loaded cores stretched that past 20 s."""


def wait_listening(proc: subprocess.Popen[Any], port: int, what: str) -> None:
    """Wait until ``proc`` accepts connections on ``port``; ``what`` names it in failures."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        assert proc.poll() is None, f"{what} exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{what} did not come up"
            time.sleep(0.1)


def count_registrations(hub: Any) -> list[int]:
    """The file descriptors ``hub`` registers with its poller (epoll), in order, from now on."""
    registered: list[int] = []
    register = hub.poller.register

    def counted(fd: Any, events: int) -> Any:
        registered.append(fd if isinstance(fd, int) else fd.fileno())
        return register(fd, events)

    hub.poller.register = counted
    return registered


def make_settings(**overrides: object) -> Settings:
    values: dict[str, object] = {
        "redis_url": REDIS_URL,
        "lease_seconds": 2.0,
        "sweep_interval": 0.2,
        "heartbeat_seconds": 0.5,
        "app": "tests.apps:registry",
        "secrets_key": SECRETS_KEY,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def pytest_configure(config: pytest.Config) -> None:
    """Start the suite's own Redis, or adopt ``TOOLQ_TEST_REDIS_URL`` if it is safe to."""
    global REDIS_URL
    given = os.environ.get("TOOLQ_TEST_REDIS_URL")
    if given:
        client = redis.Redis.from_url(given)
        try:
            if client.dbsize() and not client.exists(OWNED_MARK):
                raise pytest.UsageError(
                    f"TOOLQ_TEST_REDIS_URL={given} names a database holding keys this suite "
                    "did not write; the tests flush it. Name an empty database."
                )
            client.set(OWNED_MARK, "1")
        finally:
            client.close()
        REDIS_URL = given
        return
    if getattr(config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # pytest-xdist's controller runs no tests; each of its workers starts its own
    server = EmbeddedRedis(password=secrets.token_urlsafe(16))
    server.start()
    config.add_cleanup(server.stop)
    REDIS_URL = server.url.rsplit("/", 1)[0] + "/13"
    os.environ["TOOLQ_TEST_REDIS_URL"] = REDIS_URL


SERIAL_MARK = re.compile(r"mark\.serial\b")
"""What ``scripts/test`` looks for (with grep) to find the modules its serial run collects."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a `serial` test whose module ``scripts/test``'s serial run would not collect."""
    for path in {item.path for item in items if item.get_closest_marker("serial")}:
        if not SERIAL_MARK.search(path.read_text()):
            raise pytest.UsageError(
                f"{path} has tests marked serial without spelling `pytest.mark.serial`: "
                "scripts/test would not run them"
            )


@pytest.fixture(scope="session")
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    client.ping()
    yield client
    client.close()


@pytest.fixture
def r(redis_client: redis.Redis) -> Iterator[redis.Redis]:
    redis_client.flushdb()
    redis_client.set(OWNED_MARK, "1")
    yield redis_client
    redis_client.flushdb()
    redis_client.set(OWNED_MARK, "1")


@pytest.fixture
def settings(r: redis.Redis) -> Settings:
    return make_settings()


class Workers:
    """Starts real `toolq worker` processes and stops them at teardown."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        risk: str = "safe,moderate,dangerous",
        *,
        pool: str = "threads",
        concurrency: int = 2,
        wait: bool = True,
        log: Path | None = None,
        loglevel: str = "warning",
        prefetch: int | None = None,
        **env: str,
    ) -> subprocess.Popen[bytes]:
        environ = {
            **os.environ,
            "TOOLQ_REDIS_URL": self.settings.redis_url,
            "TOOLQ_APP": "tests.apps:registry",
            "TOOLQ_LEASE_SECONDS": str(self.settings.lease_seconds),
            "TOOLQ_SWEEP_INTERVAL": str(self.settings.sweep_interval),
            "TOOLQ_HEARTBEAT_SECONDS": str(self.settings.heartbeat_seconds),
            "PYTHONPATH": str(ROOT),
            "TOOLQ_SECRETS_KEY": SECRETS_KEY,
            **env,
        }
        argv = [
            sys.executable,
            "-m",
            "toolq",
            "worker",
            "--risk",
            risk,
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--loglevel",
            loglevel,
            *(["--prefetch", str(prefetch)] if prefetch else []),
        ]
        out = open(log, "ab") if log is not None else None  # noqa: SIM115
        proc = subprocess.Popen(argv, env=environ, cwd=ROOT, start_new_session=True,
                                stdout=out, stderr=subprocess.STDOUT if out else None)  # fmt: skip
        if out is not None:
            out.close()  # the child has its own copy
        self.procs.append(proc)
        if wait:
            self.wait_ready([RiskLevel.parse(x) for x in risk.split(",")], proc)
        return proc

    def wait_ready(self, levels: list[RiskLevel], proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while missing_queues(self.settings, levels):
            assert proc.poll() is None, f"worker exited with {proc.returncode}"
            assert time.monotonic() < deadline, "worker did not come up"
            time.sleep(0.1)

    def kill9(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker and all its pool processes at once."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    def kill_all(self) -> None:
        """SIGKILL every worker still running, with its pool processes (its process group)."""
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            proc.wait(10)


@pytest.fixture
def workers(settings: Settings) -> Iterator[Workers]:
    manager = Workers(settings)
    yield manager
    # Killed, not stopped warm: the test is over and the database is flushed next; a warm
    # shutdown only waits for the consumer's next poll (about a second) and up to 15 s for
    # the calls a test left running. Tests that check a warm stop call stop_all() themselves.
    manager.kill_all()


def settings_with_env(base: Settings, env: dict[str, str]) -> Settings:
    """``base`` with the fields ``env`` names read from it as ``TOOLQ_*`` variables."""
    named = {key.removeprefix("TOOLQ_").lower() for key in env}
    kept = {k: v for k, v in base.model_dump().items() if k not in named}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        return Settings(**kept)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class InProcess:
    """``toolq.testing.TestWorker``s for a test, closed at teardown (the in-process twin of
    ``Workers``: the same ``start`` for tests that do not need a process boundary).

    Tests using it import other test modules at module level, never inside the test:
    CPython 3.11.7's ``ast`` module keeps one process-wide recursion counter, and pytest's
    assertion rewriting (parsing an imported test module) racing a worker thread that
    formats a traceback (``ast.parse`` for its caret lines) fails with "AST constructor
    recursion depth mismatch".
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.made: list[TestWorker] = []

    def worker(
        self,
        risk: str = "safe,moderate,dangerous",
        *,
        app: str = "tests.apps:registry",
        env: dict[str, str] | None = None,
        **overrides: object,
    ) -> TestWorker:
        """A worker (not started) for ``risk``; ``Settings`` fields overridden by ``overrides``
        and by ``env`` (``TOOLQ_*`` strings, parsed as a worker process parses them)."""
        settings = settings_with_env(self.settings, env) if env else self.settings
        if overrides:
            settings = settings.model_copy(update=overrides)
        worker = TestWorker(
            settings, load_registry(app), levels=[RiskLevel.parse(x) for x in risk.split(",")]
        )
        self.made.append(worker)
        return worker

    def start(
        self,
        risk: str = "safe,moderate,dangerous",
        *,
        concurrency: int = 2,
        app: str = "tests.apps:registry",
        env: dict[str, str] | None = None,
        **overrides: object,
    ) -> TestWorker:
        """A worker draining in ``concurrency`` threads, with maintenance, until teardown."""
        worker = self.worker(risk, app=app, env=env, **overrides)
        worker.start(concurrency)
        return worker

    def stop_all(self) -> None:
        """Stop every started worker (as ``Workers.stop_all``: running calls finish first)."""
        for worker in self.made:
            worker.stop()

    def close_all(self) -> None:
        for worker in self.made:
            worker.close()


@pytest.fixture
def inproc(settings: Settings) -> Iterator[InProcess]:
    manager = InProcess(settings)
    yield manager
    manager.close_all()


@pytest.fixture
def client(settings: Settings) -> Iterator[Client]:
    from tests.apps import registry

    with Client(registry, settings) as c:
        yield c


@pytest.fixture
def wait_for() -> Callable[..., None]:
    def wait(predicate: Callable[[], bool], timeout: float = 10, message: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, message or "condition not met in time"
            time.sleep(0.05)

    return wait


def serve(app: object) -> Iterator[str]:
    """Run an ASGI app with uvicorn on a free port in a thread; yield its URL."""
    import threading

    import uvicorn

    from toolq.cli.stack import _free_port

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def approve_shown(
    api: Any,
    call_id: str,
    headers: Mapping[str, str],
    *,
    reader: Mapping[str, str] | None = None,
    **body: Any,
) -> Any:
    """``POST /v1/approvals/{call_id}/approve`` as an approver makes it: reviewed first.

    Sends the ``digest`` that ``GET /v1/approvals/{call_id}`` returned (read with
    ``reader``'s headers, by default ``headers``) beside ``body`` (``arguments``, ``note``,
    ``always``); returns the approval's ``httpx.Response``. ``api`` is the API's URL, or a
    client whose base URL is the API (an ``httpx.Client``, a ``TestClient``).
    """
    import httpx

    http, base = (httpx, api.rstrip("/")) if isinstance(api, str) else (api, "")
    path = f"{base}/v1/approvals/{quote(call_id, safe='')}"
    shown = http.get(path, headers=reader or headers)
    assert shown.status_code == 200, shown.text
    digest = shown.json()["digest"]
    return http.post(f"{path}/approve", headers=headers, json={"digest": digest, **body})
