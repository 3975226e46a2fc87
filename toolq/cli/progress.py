"""``dispatch --wait``'s progress on stderr: a live status on a terminal, plain lines otherwise.

stdout stays the JSON result: scripts read it whatever stderr shows.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import typer
from rich.console import Console

from toolq.dispatch.client import Batch, Client
from toolq.models import CallStatus

PLAIN_EVERY = 1.0
"""Seconds between two plain progress lines (the last one is always printed)."""


def summary(run_id: str, states: dict[str, CallStatus | None]) -> str:
    """``run R: 1 queued, 1 parked, 0 running, 2/4 done (1 succeeded, 1 failed)``."""
    count = Counter(states.values())
    done = {s: n for s, n in count.items() if s is not None and s.is_final}
    outcomes = ", ".join(f"{n} {s.value}" for s, n in sorted(done.items()))
    return (
        f"run {run_id}: {count[CallStatus.QUEUED]} queued, "
        f"{count[CallStatus.AWAITING_APPROVAL]} parked, {count[CallStatus.RUNNING]} running, "
        f"{sum(done.values())}/{len(states)} done" + (f" ({outcomes})" if outcomes else "")
    )


def watch(client: Client, batch: Batch, timeout: float) -> None:
    """Follow the batch's calls until every one is final or ``timeout`` runs out."""
    cell = client.cell_for_run(batch.run_id)
    # The newest event id first, then the states: a change after the read is an event after it.
    after = cell.log.last_id(batch.run_id)
    states = dict(zip(batch.call_ids, cell.store.statuses(batch.call_ids), strict=True))
    events = batch.events(after=after, follow=True, timeout=timeout)
    if sys.stderr.isatty():
        console = Console(stderr=True, highlight=False)
        with console.status(summary(batch.run_id, states)) as status:
            for event in events:
                if _apply(states, event.call_id, event.data.get("status")):
                    status.update(summary(batch.run_id, states))
        console.print(summary(batch.run_id, states))
        return
    shown = summary(batch.run_id, states)
    typer.echo(shown, err=True)
    last = time.monotonic()
    for event in events:
        if not _apply(states, event.call_id, event.data.get("status")):
            continue
        line = summary(batch.run_id, states)
        if line != shown and time.monotonic() - last >= PLAIN_EVERY:
            typer.echo(line, err=True)
            shown, last = line, time.monotonic()
    line = summary(batch.run_id, states)
    if line != shown:
        typer.echo(line, err=True)


def _apply(states: dict[str, CallStatus | None], call_id: str, status: object) -> bool:
    """Record a call's new state from an event; whether it was one of the batch's."""
    if call_id not in states or not isinstance(status, str):
        return False
    try:
        states[call_id] = CallStatus(status)
    except ValueError:
        return False
    return True
