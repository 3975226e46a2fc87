"""Alembic, run from the migrations shipped in the package (no ``alembic.ini`` needed)."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine


def alembic_config() -> Config:
    """An Alembic config whose scripts are ``toolq/history/migrations``."""
    config = Config()
    location = resources.files("toolq.history") / "migrations"
    config.set_main_option("script_location", str(location))
    return config


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the history tables behind ``engine`` to ``revision``."""
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
