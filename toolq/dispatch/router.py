"""``CellRouter``: the ``Client`` over every cell of ``TOOLQ_SHARDS``.

It holds one single-Redis ``Client`` per cell and sends each run and call to its cell's
(``toolq.cells`` says which cell holds what); listings merge the cells that answer. Its
methods are those of ``Client``, made from them (same names, parameters and docstrings), so
code that takes a ``Client`` never branches on cells; ``Client.dispatch`` builds a
``Submission`` and hands it to ``submit``, which the router sends to the run's cell.
``Client(registry, settings)`` builds one when the settings list cells.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from toolq.cells import ApprovalRouter, Cell, CellRouting, Cells, merged, on_call, on_run
from toolq.dispatch.client import Batch, CellState, Client
from toolq.dispatch.submission import Submission
from toolq.models import CallResult
from toolq.redis_target import RedisTarget
from toolq.registry.registry import ToolRegistry
from toolq.results.paging import Page, merge_pages
from toolq.results.runs import RunSummary
from toolq.settings import Settings

if TYPE_CHECKING:
    from toolq.history.store import HistoryStore

F = TypeVar("F", bound=Callable[..., Any])


def _waiting(method: F) -> F:
    """``Client.wait`` in the cell of the calls (of one run): the first call's."""

    @functools.wraps(method)
    def wait(self: CellRouter, call_ids: Sequence[str], **kwargs: Any) -> list[CallResult]:
        ids = list(call_ids)
        if not ids:
            return []
        return self.cells.on_call(ids[0], lambda cell: self._part(cell).wait(ids, **kwargs))

    return cast(F, wait)


def _runs(pages: list[Page[RunSummary]], given: dict[str, Any]) -> Page[RunSummary]:
    return merge_pages(pages, given["limit"], key=lambda s: (s.last_dispatch_at or 0.0, s.run_id))


class CellRouter(CellRouting, Client):
    """A ``Client`` over every cell: each run and call goes to its cell's ``Client``.

    It has no Redis of its own: what one cell holds is read through ``cell_for_run``,
    ``cell_for_call`` or ``reachable`` (each cell's ``Client``).
    """

    def __init__(
        self, registry: ToolRegistry, settings: Settings | None = None, **_: object
    ) -> None:
        """Every cell of ``settings.shards`` (``Client(registry, settings)`` calls it)."""
        self.registry = registry
        self.settings = settings or Settings()
        self.cells = Cells(self.settings, registry)
        self._clients = [Client(registry, backend=cell.backend) for cell in self.cells]
        self.approval_store = ApprovalRouter(self.cells)
        self.approvals = self.approval_store

    def _part(self, cell: Cell) -> Client:
        return self._clients[cell.index]

    @property
    def cell_clients(self) -> list[Client]:
        """The single-Redis client of each cell, in cell order."""
        return list(self._clients)

    def cell_for_run(self, run_id: str) -> Client:
        """The client of the cell holding ``run_id`` (``CellUnavailableError`` if it is down)."""
        return self._clients[self.cells.for_run(run_id).index]

    def cell_for_call(self, call_id: str) -> Client:
        """The client of the cell holding ``call_id`` (``CellUnavailableError`` if it is down)."""
        return self._clients[self.cells.for_call(call_id).index]

    def reachable(
        self, run_id: str | None = None
    ) -> tuple[list[tuple[int | None, Client]], list[CellState]]:
        """The cells that answer, as (index, client), and those that do not.

        With ``run_id``: only that run's cell (index ``None``).
        """
        if run_id is not None:
            return [(None, self.cell_for_run(run_id))], []
        up, down = self.cells.split()
        return [(c.index, self._clients[c.index]) for c in up], [
            CellState(c.index, c.where, False) for c in down
        ]

    def each_cell(self) -> list[tuple[int | None, Client]]:
        """Every cell as (its index, its client), answering or not."""
        return list(enumerate(self._clients))

    def cell_states(self) -> list[CellState]:
        """Every cell and whether it answers."""
        up, _ = self.cells.split()
        return [CellState(c.index, c.where, c in up) for c in self.cells]

    @property
    def redis_target(self) -> RedisTarget | None:
        """None: each request checks the cells it touches (``toolq.cells``)."""
        return None

    @property
    def history(self) -> HistoryStore | None:
        """The history store: one SQL database for every cell (``TOOLQ_HISTORY_URL``)."""
        return self._clients[0].history

    def submit(self, payload: Any, submission: Submission) -> Batch:
        """``Client.submit`` in the run's cell; a new run in its home cell (or the next up).

        The batch's reads go on under that cell's guard.
        """
        given = submission.run_id
        run = given or uuid.uuid4().hex
        cell = self.cells.for_run(run) if given else self.cells.for_new_run(run)
        with cell.guard():
            batch = self._part(cell).submit(payload, dataclasses.replace(submission, run_id=run))
        self.cells.remember_run(run, cell)
        for call_id in batch.call_ids:
            self.cells.remember_call(call_id, cell)
        batch.guard = cell.guard
        return batch

    result = on_call(Client.result)
    retry = on_call(Client.retry)
    cancel = on_call(Client.cancel)
    resolve_unknown = on_call(Client.resolve_unknown)
    undo = on_call(Client.undo)
    undo_gate = on_call(Client.undo_gate)
    undo_data = on_call(Client.undo_data)
    results = on_run(Client.results)
    calls_page = on_run(Client.calls_page)
    run = on_run(Client.run)
    to_messages = on_run(Client.to_messages)
    events = on_run(Client.events, stream=True)
    runs = merged(_runs)(Client.runs)

    wait = _waiting(Client.wait)

    def close(self) -> None:
        """Close every cell."""
        self.cells.close()
