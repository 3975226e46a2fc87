"""Alembic, run from the migrations shipped in the package (no ``alembic.ini`` needed).

Several processes may open the same store at once (``toolq dev`` starts its workers and API
together, each upgrading its SQLite file): an upgrade holds a lock while it runs, a file
lock beside an SQLite database or a transaction-level advisory lock in PostgreSQL, so the
second process finds the tables made and does nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

LOCK_ID = 0x746F6F6C71
"""The PostgreSQL advisory lock an upgrade holds (``toolq`` in ASCII)."""


def alembic_config() -> Config:
    """An Alembic config whose scripts are ``toolq/history/migrations``."""
    config = Config()
    location = resources.files("toolq.history") / "migrations"
    config.set_main_option("script_location", str(location))
    return config


@contextlib.contextmanager
def _file_lock(engine: Engine) -> Iterator[None]:
    """An exclusive lock on ``<database>.lock`` (nothing for an in-memory database)."""
    database = engine.url.database
    if not database or database == ":memory:":
        yield
        return
    with open(Path(database).with_name(Path(database).name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the history tables behind ``engine`` to ``revision``, one process at a time."""
    config = alembic_config()
    sqlite = engine.url.get_backend_name() == "sqlite"
    locked = _file_lock(engine) if sqlite else contextlib.nullcontext()
    with locked, engine.begin() as connection:
        if not sqlite:
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": LOCK_ID})
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
