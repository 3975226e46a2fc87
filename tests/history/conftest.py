"""History stores for the tests: an SQLite file, and a PostgreSQL the session starts itself.

PostgreSQL runs from Debian's binaries (``/usr/lib/postgresql/*/bin``): ``initdb`` in a
temporary directory, then ``postgres`` on a free port with its socket in that directory,
stopped by its PID at the end of the session. A server already on the machine is never
used. Without the binaries the PostgreSQL cases are skipped, saying so.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolq.cli.stack import _free_port
from toolq.history.store import HistoryStore


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class Postgres:
    """One private PostgreSQL cluster: ``url(database)``; ``create()`` a new database."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="toolq-pg-"))
        self.port = _free_port()
        self.user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:  # initdb refuses root: run the cluster as the postgres user
            self.user = pwd.getpwnam("postgres")
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.proc: subprocess.Popen[bytes] | None = None

    def _run(self, *argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            argv, check=True, capture_output=True, user=self.user.pw_uid if self.user else None
        )

    def start(self) -> None:
        data = self.root / "data"
        self._run(str(self.bin / "initdb"), "-D", str(data), "-U", "toolq", "-A", "trust",
                  "--no-sync")  # fmt: skip
        self.proc = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-k",
                str(self.root),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            user=self.user.pw_uid if self.user else None,
        )
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self._dsn("postgres"), connect_timeout=1).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.1)

    def _dsn(self, database: str) -> str:
        return f"postgresql://toolq@127.0.0.1:{self.port}/{database}"

    def create(self) -> str:
        """A new empty database; its SQLAlchemy URL."""
        import psycopg

        name = f"h{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://toolq@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown, by the PID we started
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    bin_dir = _binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL binaries not installed (/usr/lib/postgresql/*/bin/initdb)")
    server = Postgres(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh history store's URL: an SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/history.db"
    server: Postgres = request.getfixturevalue("postgres")
    url = server.create()
    HistoryStore(url, upgrade=True).close()  # what ``toolq history upgrade`` does
    return url
