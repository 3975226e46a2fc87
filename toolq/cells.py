"""``Cells``: runs spread over independent Redis cells (``TOOLQ_SHARDS``), and which holds what.

A run lives in one cell: its calls, events, approvals, rules and undo data, so every Lua
script stays on one Redis. A new run goes to the cell a stable hash of its id names
(``home_cell``). A run created under a shorter list of cells is still found: when the
hashed cell does not know a run, the other cells are asked for its keys, and the answer is
remembered (runs never move). Call ids are toolq's own random ids, so they say nothing of
their cell: a call is looked for in every cell (its record key), and the answer remembered.

Each cell is checked with a short PING (no retries) at most once a second before it is used,
so a request for a run in a cell that is down fails at once with ``CellUnavailableError``
naming the cell, while the other cells' runs go on (and a new run under a fresh id starts
in a cell that answers).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import redis

from toolq.approvals.models import ApprovalRequest, AuditEntry
from toolq.approvals.store import ApprovalStore
from toolq.backend import Backend
from toolq.errors import CallNotFoundError, CellUnavailableError
from toolq.forks import fresh_in_children
from toolq.registry.registry import ToolRegistry
from toolq.results.connection import RedisTarget, probe_client
from toolq.results.paging import Cursor, Page
from toolq.settings import Settings

PING_TIMEOUT = 2.0
"""Seconds a cell's PING may take before the cell is reported down (a loaded host can take
over half a second to accept a connection to a healthy Redis)."""
FRESH_SECONDS = 1.0
"""A PING that succeeded is trusted this long: a healthy cell costs one PING a second."""
T = TypeVar("T")

REMEMBERED = 100_000
"""Runs and calls whose cell is remembered (least recently used forgotten first)."""


def home_cell(run_id: str, count: int) -> int:
    """The cell a new run goes to: SHA-256 of its id, modulo the number of cells."""
    digest = hashlib.sha256(run_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


class Cell:
    """One Redis of ``TOOLQ_SHARDS``: its ``Backend`` and whether it answers."""

    def __init__(self, index: int, backend: Backend) -> None:
        self.index = index
        self.backend = backend
        self.where = RedisTarget.of(backend.settings).describe()
        self._probe = probe_client(backend.settings, PING_TIMEOUT)
        self._ok_at = 0.0

    @property
    def name(self) -> str:
        """``cell N (address)`` for messages."""
        return f"cell {self.index} ({self.where})"

    def unavailable(self, reason: str) -> CellUnavailableError:
        """The error naming this cell."""
        return CellUnavailableError(
            f"{self.name} does not answer: {reason}", cell=self.index, where=self.where
        )

    def check(self, fresh: float = FRESH_SECONDS) -> None:
        """Raise ``CellUnavailableError`` unless the cell answered within ``fresh`` seconds."""
        if time.monotonic() - self._ok_at < fresh:
            return
        try:
            self._probe.ping()
        except (redis.RedisError, OSError) as exc:
            self._ok_at = 0.0
            raise self.unavailable(_reason(exc)) from None
        self._ok_at = time.monotonic()

    def is_up(self) -> bool:
        """True when the cell answers (``check`` without the error)."""
        try:
            self.check()
        except CellUnavailableError:
            return False
        return True

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Check the cell first; a connection lost inside becomes ``CellUnavailableError``."""
        self.check()
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self._ok_at = 0.0
            raise self.unavailable(_reason(exc)) from exc

    def guarded(self, inner: Iterator[T]) -> Iterator[T]:
        """``inner`` iterated under ``guard``: a cell lost mid-stream is CellUnavailableError."""
        with self.guard():
            yield from inner

    def close(self) -> None:
        """Close the cell's probe and backend."""
        self._probe.close()
        self.backend.close()


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


class Cells:
    """Every cell of ``TOOLQ_SHARDS``, and which one holds a run or a call."""

    def __init__(self, settings: Settings, registry: ToolRegistry) -> None:
        if not settings.shards:
            raise ValueError("Cells need TOOLQ_SHARDS")
        self.settings = settings
        self.cells = [
            Cell(i, Backend(settings.for_cell(i), registry)) for i in range(len(settings.shards))
        ]
        self.open = [c for c in self.cells if not settings.draining(c.index)]
        """The cells new runs go to (every cell but those ``draining``)."""
        self._runs: OrderedDict[str, int] = OrderedDict()
        self._calls: OrderedDict[str, int] = OrderedDict()
        self.after_fork()
        fresh_in_children(self)

    def after_fork(self) -> None:
        """A lock of its own: at start, and in a forked child.

        A thread of the parent may hold the parent's.
        """
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[Cell]:
        return iter(self.cells)

    def __len__(self) -> int:
        return len(self.cells)

    def _remember(self, seen: OrderedDict[str, int], key: str, index: int) -> None:
        with self._lock:
            seen[key] = index
            seen.move_to_end(key)
            if len(seen) > REMEMBERED:
                seen.popitem(last=False)

    def _recalled(self, seen: OrderedDict[str, int], key: str) -> Cell | None:
        with self._lock:
            index = seen.get(key)
        return self.cells[index] if index is not None else None

    def _has_run(self, cell: Cell, run_id: str) -> bool:
        keys = cell.backend.keys
        with cell.guard():
            found = cell.backend.redis.exists(
                keys.run_owner(run_id), keys.run_calls(run_id), keys.run_settings(run_id)
            )
        return bool(found)

    def home(self, run_id: str) -> Cell:
        """The cell a new run with this id goes to: ``home_cell`` among the cells not draining."""
        return self.open[home_cell(run_id, len(self.open))]

    def for_run(self, run_id: str) -> Cell:
        """The cell holding ``run_id``; its home cell when no reachable cell knows it yet.

        Raises ``CellUnavailableError`` when that cell is down.
        """
        known = self._recalled(self._runs, run_id)
        if known is not None:
            known.check()
            return known
        home = self.home(run_id)
        if home.is_up() and self._has_run(home, run_id):
            self._remember(self._runs, run_id, home.index)
            return home
        for cell in self.cells:
            if cell is home or not cell.is_up():
                continue
            if self._has_run(cell, run_id):
                self._remember(self._runs, run_id, cell.index)
                return cell
        home.check()  # a new run (or one in a cell that is down): its home cell
        return home

    def for_new_run(self, run_id: str) -> Cell:
        """A cell for a run id just made: its home cell, else the next open cell that answers.

        No cell can hold a run under a fresh random id, so while its home cell is down the
        run can start in another one (``for_run`` finds it there later, as any run).
        """
        home = self.home(run_id)
        start = self.open.index(home)
        for cell in self.open[start:] + self.open[:start]:
            if cell.is_up():
                return cell
        home.check()  # none answers: the error names the home cell
        return home

    def for_call(self, call_id: str) -> Cell:
        """The cell holding ``call_id``.

        Raises ``CallNotFoundError`` when no cell knows it (nor the history store: an
        archived call's run's cell), ``CellUnavailableError`` when it is in none of the
        cells that answer and some cell does not.
        """
        known = self._recalled(self._calls, call_id)
        if known is not None:
            known.check()
            return known
        down: list[Cell] = []
        for cell in self.cells:
            if not cell.is_up():
                down.append(cell)
                continue
            with cell.guard():
                found = cell.backend.redis.exists(cell.backend.keys.call(call_id))
            if found:
                self._remember(self._calls, call_id, cell.index)
                return cell
        if down:
            names = ", ".join(c.name for c in down)
            raise CellUnavailableError(
                f"call {call_id!r} is in no cell that answers; {names} does not answer",
                cell=down[0].index,
                where=down[0].where,
            )
        run_id = self._archived_run(call_id)
        if run_id is None:
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        cell = self.for_run(run_id)
        self._remember(self._calls, call_id, cell.index)
        return cell

    def _archived_run(self, call_id: str) -> str | None:
        """The run of a call that left every cell's Redis for the history store (or None).

        One SQL database serves every cell: past its hot window a call is read from there
        by any process, not only by one that saw it in its cell.
        """
        first = self.cells[0]
        with first.guard():
            history = first.backend.history  # opening it touches the cell's Redis
        if history is None:
            return None
        record = history.records([call_id]).get(call_id)
        return record.get("run_id") if record else None

    def on_run(self, run_id: str, act: Callable[[Cell], T]) -> T:
        """``act`` on the run's cell, under its ``guard``."""
        cell = self.for_run(run_id)
        with cell.guard():
            return act(cell)

    def on_call(self, call_id: str, act: Callable[[Cell], T]) -> T:
        """``act`` on the call's cell, under its ``guard``."""
        cell = self.for_call(call_id)
        with cell.guard():
            return act(cell)

    def remember_call(self, call_id: str, cell: Cell) -> None:
        """Note where a call just created lives."""
        self._remember(self._calls, call_id, cell.index)

    def remember_run(self, run_id: str, cell: Cell) -> None:
        """Note where a run lives."""
        self._remember(self._runs, run_id, cell.index)

    def split(self) -> tuple[list[Cell], list[Cell]]:
        """The cells that answer and those that do not, for listings that merge every cell."""
        up: list[Cell] = []
        down: list[Cell] = []
        for cell in self.cells:
            (up if cell.is_up() else down).append(cell)
        return up, down

    def close(self) -> None:
        """Close every cell."""
        for cell in self.cells:
            cell.close()


class CellRouting:
    """What a router over cells has: the ``Cells``, and each cell's part it sends calls to.

    ``on_call``, ``on_run`` and ``merged`` turn a method of the part's class into the
    router's method of the same name, signature and docstring.
    """

    cells: Cells

    def _part(self, cell: Cell) -> Any:
        """The object of ``cell`` that does the work (its client, its approval store)."""
        raise NotImplementedError

    def _each(self, read: Callable[[Any], T]) -> list[T]:
        """``read`` on the part of every cell that answers; a cell down is left out."""
        up, _ = self.cells.split()
        out: list[T] = []
        for cell in up:
            try:
                with cell.guard():
                    out.append(read(self._part(cell)))
            except CellUnavailableError:
                continue  # went down since ``split``: left out, as those found down
        return out


F = TypeVar("F", bound=Callable[..., Any])


def _first_parameter(method: Callable[..., Any]) -> str:
    return list(inspect.signature(method).parameters)[1]


def _routed(method: F, by_call: bool, stream: bool) -> F:
    name = method.__name__
    key = _first_parameter(method)

    @functools.wraps(method)
    def routed(self: CellRouting, *args: Any, **kwargs: Any) -> Any:
        ident = kwargs[key] if key in kwargs else args[0]

        def act(cell: Cell) -> Any:
            answer = getattr(self._part(cell), name)(*args, **kwargs)
            return cell.guarded(answer) if stream else answer

        locate = self.cells.on_call if by_call else self.cells.on_run
        return locate(ident, act)

    return cast(F, routed)


def on_call(method: F) -> F:
    """``method`` run on the part of the cell holding the call its first argument names."""
    return _routed(method, by_call=True, stream=False)


def on_run(method: F, *, stream: bool = False) -> F:
    """``method`` run on the part of the cell holding the run its first argument names.

    ``stream``: it returns an iterator, read under the cell's guard (a cell lost while it is
    read raises ``CellUnavailableError``).
    """
    return _routed(method, by_call=False, stream=stream)


def merged(merge: Callable[[list[Any], dict[str, Any]], Any]) -> Callable[[F], F]:
    """``method`` run on every cell that answers, the answers put together by ``merge``.

    ``merge`` is given the answers and the call's arguments by name. A call with a
    ``run_id`` runs on that run's cell only.
    """

    def wrap(method: F) -> F:
        name = method.__name__
        signature = inspect.signature(method)

        @functools.wraps(method)
        def routed(self: CellRouting, *args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            given = dict(bound.arguments)
            run_id = given.get("run_id")
            if run_id is not None:
                act = lambda cell: getattr(self._part(cell), name)(*args, **kwargs)  # noqa: E731
                return self.cells.on_run(run_id, act)
            return merge(self._each(lambda part: getattr(part, name)(*args, **kwargs)), given)

        return cast(F, routed)

    return wrap


def _pending(found: list[list[ApprovalRequest]], _: dict[str, Any]) -> list[ApprovalRequest]:
    return sorted((r for one in found for r in one), key=lambda r: r.deadline or 0.0)


def _joined(found: list[list[T]], _: dict[str, Any]) -> list[T]:
    return [item for one in found for item in one]


def _audit(found: list[list[AuditEntry]], given: dict[str, Any]) -> list[AuditEntry]:
    return sorted((e for one in found for e in one), key=_stream_order)[: given["count"]]


def _total(found: list[int], _: dict[str, Any]) -> int:
    return sum(found)


def _approval_pages(
    pages: list[Page[ApprovalRequest]], given: dict[str, Any]
) -> Page[ApprovalRequest]:
    """Each cell's page from the same cursor, merged.

    Cursors are (parking time, call id) in every cell, so one cursor goes on in all.
    """
    limit: int = given["limit"]
    # A cell whose page ended (early or full) bounds what the merge may show.
    ends = [Cursor.decode(p.next_cursor) for p in pages if p.next_cursor]
    end = min(((float(c.score), c.member) for c in ends), default=None)
    found = sorted((r for p in pages for r in p.items), key=lambda r: (r.created_at, r.call_id))
    if end is not None:
        found = [r for r in found if (r.created_at, r.call_id) <= end]
    shown = found[:limit]
    next_cursor = None
    if len(found) > limit:
        next_cursor = Cursor(repr(shown[-1].created_at), shown[-1].call_id).encode()
    elif end is not None:
        next_cursor = Cursor(repr(end[0]), end[1]).encode()
    totals = [p.total for p in pages]
    total = None if None in totals else sum(t for t in totals if t is not None)
    return Page(shown, next_cursor, total)


class ApprovalRouter(CellRouting, ApprovalStore):
    """The approval store over every cell: each cell's ``ApprovalStore`` behind one.

    A decision goes to the call's (or run's) cell; listings merge the cells that answer.
    An ``ApprovalStore`` by type only (everything typed with one takes it): it has no store
    of its own, each method is the cell's.
    """

    def __init__(self, cells: Cells) -> None:
        self.cells = cells

    def _part(self, cell: Cell) -> ApprovalStore:
        return cell.backend.approvals

    get = on_call(ApprovalStore.get)
    approve = on_call(ApprovalStore.approve)
    deny = on_call(ApprovalStore.deny)
    refused = on_call(ApprovalStore.refused)
    approve_run = on_run(ApprovalStore.approve_run)
    decide_run = on_run(ApprovalStore.decide_run)
    rules = on_run(ApprovalStore.rules)
    set_rules = on_run(ApprovalStore.set_rules)
    export_state = on_run(ApprovalStore.export_state)
    restore_state = on_run(ApprovalStore.restore_state)
    pending = merged(_pending)(ApprovalStore.pending)
    page = merged(_approval_pages)(ApprovalStore.page)
    unknown = merged(_joined)(ApprovalStore.unknown)
    audit = merged(_audit)(ApprovalStore.audit)
    expire_due = merged(_total)(ApprovalStore.expire_due)


def _stream_order(entry: AuditEntry) -> tuple[int, int]:
    ms, _, seq = entry.id.partition("-")
    return int(ms), int(seq or 0)
