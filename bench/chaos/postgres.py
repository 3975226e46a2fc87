"""A private PostgreSQL for the benchmarks: ``initdb`` in a temporary directory, a free port.

Debian's binaries (``/usr/lib/postgresql/*/bin``), as in the tests' fixture
(``tests/history/conftest.py``); the server is started and stopped by its own PID, and a
server already on the machine is never used. Under root the cluster runs as ``postgres``
(``initdb`` refuses root). ``stop`` + ``start`` keep the data: the ``sql-restart`` fault.
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
from pathlib import Path

from toolq.cli.stack import _free_port


def binaries() -> Path | None:
    """The newest installed PostgreSQL's ``bin`` directory, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PrivatePostgres:
    """One private cluster: ``start``, ``create()`` a database, ``stop`` and ``start`` again."""

    def __init__(self, root: Path | None = None) -> None:
        bin_dir = binaries()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL binaries not installed (/usr/lib/postgresql/*/bin)")
        self.bin = bin_dir
        self.root = root or Path(tempfile.mkdtemp(prefix="toolq-pg-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self.user = pwd.getpwnam("postgres")
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.proc: subprocess.Popen[bytes] | None = None
        self.data = self.root / "data"

    def _uid(self) -> int | None:
        return self.user.pw_uid if self.user else None

    def start(self, timeout: float = 30) -> None:
        """``initdb`` the first time, then start the server and wait until it answers."""
        if not self.data.exists():
            subprocess.run(
                [str(self.bin / "initdb"), "-D", str(self.data), "-U", "toolq", "-A", "trust",
                 "--no-sync"],
                check=True, capture_output=True, user=self._uid(),
            )  # fmt: skip
        with open(self.root / "postgres.log", "ab") as log:
            if self.user:
                os.chown(self.root / "postgres.log", self.user.pw_uid, self.user.pw_gid)
            self.proc = subprocess.Popen(
                [
                    str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                    "-k", str(self.root), "-c", "listen_addresses=127.0.0.1",
                    "-c", "fsync=off", "-c", "max_connections=200",
                ],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, user=self._uid(),
            )  # fmt: skip
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn("postgres"), connect_timeout=1).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.1)

    def dsn(self, database: str) -> str:
        """A libpq URL of ``database``."""
        return f"postgresql://toolq@127.0.0.1:{self.port}/{database}"

    def create(self) -> str:
        """A new empty database; its SQLAlchemy URL."""
        import psycopg

        name = f"h{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://toolq@127.0.0.1:{self.port}/{name}"

    def stop(self, mode: signal.Signals = signal.SIGINT) -> None:
        """Stop the server by its PID: SIGINT is PostgreSQL's fast shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(mode)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove(self) -> None:
        """Stop for good and delete the cluster."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
