"""``toolq worker``: a Celery worker consuming the queues of the named risk levels."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import typer
from celery.signals import celeryd_after_setup, worker_init

from toolq.cli.common import (
    APP_HELP,
    REDIS_OPTION,
    load_registry,
    log_level_option,
    one_of,
    parse_risks,
    risk_list,
    settings_for,
)
from toolq.keys import Keys
from toolq.secretbox import SecretBox
from toolq.settings import Settings
from toolq.signing import verifier_for
from toolq.workers.app import create_celery
from toolq.workers.logs import quiet_expected_reconnects

POOLS = ("prefork", "threads", "solo")


def worker(
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    risk: str = typer.Option(
        "safe,moderate,dangerous",
        callback=parse_risks,
        help="Risk queues to consume (comma-separated).",
    ),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        "-c",
        help="Processes/threads: the most synchronous calls the worker runs at once.",
    ),
    async_concurrency: int | None = typer.Option(
        None,
        "--async-concurrency",
        envvar="TOOLQ_ASYNC_CONCURRENCY",
        min=1,
        help="Most async def calls the worker runs at once (default 100).",
    ),
    pool: str = typer.Option("prefork", callback=one_of(*POOLS), help="prefork, threads or solo."),
    prefetch: int | None = typer.Option(
        None, help="Prefetch multiplier (default 1: a worker takes a message when a slot frees)."
    ),
    log_level: str = log_level_option("info"),
    hostname: str | None = typer.Option(None, "--hostname", "-n", help="Celery node name."),
    redis_url: str | None = REDIS_OPTION,
    shard: int | None = typer.Option(
        None,
        "--shard",
        envvar="TOOLQ_SHARD",
        min=0,
        help="With TOOLQ_SHARDS: the cell (index in the list) to consume and sweep.",
    ),
) -> None:
    """Run a worker. SIGTERM finishes running calls first (warm shutdown)."""
    settings = settings_for(app, redis_url).for_shard(shard)
    if async_concurrency is not None:
        settings = settings.model_copy(update={"async_concurrency": async_concurrency})
    registry = load_registry(settings.app, settings)
    verifier_for(settings)  # a malformed verify key stops the worker here, not per call
    levels = risk_list(risk)
    for tool in registry.list():
        if tool.risk in levels:
            tool.check_runtime()  # e.g. the sandbox's namespaces: refuse to start without them
    keys = Keys(settings.key_prefix)
    if prefetch is None:
        # A message held in reserve by a busy worker waits while another worker's slot may
        # be free: calls a busy slot gives back must reach a free one (work-conserving).
        # Fair share: a reserved message has left admission's count, so reserves would fill
        # with a busy tenant's messages, ahead of every newcomer.
        prefetch = 1
    cell = f"cell{settings.shard}-" if settings.shard is not None else ""
    name = hostname or f"toolq-{cell}{'-'.join(level.value for level in levels)}-{os.getpid()}@%h"
    if SecretBox.from_settings(settings) is None:  # a malformed key fails here, at start
        secretive = sorted(t.name for t in registry if t.secret_paths.any)
        if secretive:
            typer.echo(
                f"warning: no TOOLQ_SECRETS_KEY: calls of {', '.join(secretive)} with secret "
                "arguments will fail",
                err=True,
            )
    argv = [
        "worker",
        "--queues",
        ",".join(keys.queue_for(level) for level in levels),
        "--pool",
        pool,
        "--loglevel",
        log_level,
        "--hostname",
        name,
        "--prefetch-multiplier",
        str(prefetch),
        "--without-gossip",
        "--without-mingle",
    ]
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    fatal = _LastCritical()
    logging.getLogger("celery.worker").addHandler(fatal)
    # After Celery's logging setup, which turns its deprecation warnings back on.
    celeryd_after_setup.connect(lambda **_: quiet_expected_reconnects(), weak=False)
    started: list[Any] = []
    worker_init.connect(lambda sender, **_: started.append(sender), weak=False)
    create_celery(
        settings, registry, async_slots=async_slots(settings, pool, concurrency)
    ).worker_main(argv)
    # ``worker_main`` drops the worker's exit status: a worker whose consumer died would
    # exit 0, which a supervisor restarting on failure (``Restart=on-failure``) ignores.
    code = started[-1].exitcode if started else 1
    if code:
        reason = fatal.reason or "the Celery worker stopped with an error"
        # The real stderr: Celery still redirects ``sys.stderr`` into its logger here.
        stderr = sys.__stderr__ or sys.stderr
        print(f"toolq worker: exiting with status {code}: {reason}", file=stderr, flush=True)
        raise typer.Exit(code)


def async_slots(settings: Settings, pool: str, concurrency: int | None) -> int:
    """The ``async def`` calls each pool process runs at once: a prefork worker's share.

    Prefork processes each have their own event loop and get an equal share of
    ``async_concurrency`` (at least one); threads and solo workers are one process.
    """
    if pool != "prefork":
        return settings.async_concurrency
    processes = concurrency or os.cpu_count() or 1  # Celery's default concurrency
    return max(1, settings.async_concurrency // processes)


class _LastCritical(logging.Handler):
    """Keeps the first line of the last critical record (Celery's "Unrecoverable error")."""

    def __init__(self) -> None:
        super().__init__(logging.CRITICAL)
        self.reason = ""

    def emit(self, record: logging.LogRecord) -> None:
        """Remember the message, first line only."""
        self.reason = record.getMessage().splitlines()[0] if record.getMessage() else ""
