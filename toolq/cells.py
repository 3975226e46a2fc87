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

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from toolq.approvals.models import ApprovalRequest, AuditEntry
from toolq.approvals.policy import ApprovalMode, RunRules
from toolq.approvals.store import ApprovalStore
from toolq.backend import Backend
from toolq.errors import CallNotFoundError, CellUnavailableError, ToolqError
from toolq.models import CallResult, RiskLevel
from toolq.registry.registry import ToolRegistry
from toolq.results.connection import RedisTarget, probe_client
from toolq.results.paging import DEFAULT_LIMIT, Cursor, Page
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

        Raises ``CallNotFoundError`` when no cell knows it, ``CellUnavailableError`` when it
        is in none of the cells that answer and some cell does not.
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
        raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)

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


class CellApprovals(ApprovalStore):
    """The approval store over every cell: a decision goes to the call's cell, listings merge.

    It is an ``ApprovalStore`` (built over the first cell, which it never uses itself) so
    that everything typed with one takes it.
    """

    def __init__(self, cells: Cells) -> None:
        first = cells.cells[0].backend
        super().__init__(
            first.store, first.publisher, first.registry, first.policy, owners=first.owners
        )
        self.cells = cells

    def _on_call(self, call_id: str, act: Callable[[ApprovalStore], T]) -> T:
        return self.cells.on_call(call_id, lambda cell: act(cell.backend.approvals))

    def _on_run(self, run_id: str, act: Callable[[ApprovalStore], T]) -> T:
        return self.cells.on_run(run_id, lambda cell: act(cell.backend.approvals))

    def _each(self, read: Callable[[ApprovalStore], list[T]]) -> list[T]:
        up, _ = self.cells.split()
        out: list[T] = []
        for cell in up:
            try:
                with cell.guard():
                    out.extend(read(cell.backend.approvals))
            except CellUnavailableError:
                continue  # went down since ``split``: left out, as those found down
        return out

    def pending(
        self,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
    ) -> list[ApprovalRequest]:
        """Calls awaiting a decision in every cell that answers, soonest deadline first."""
        if run_id is not None:
            return self._on_run(run_id, lambda a: a.pending(run_id, risk, tool))
        found = self._each(lambda a: a.pending(None, risk, tool))
        return sorted(found, key=lambda r: r.deadline or 0.0)

    def page(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
        since: float | None = None,
        until: float | None = None,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
        tenant: str | None = None,
    ) -> Page[ApprovalRequest]:
        """One page over every cell that answers: each cell's page from the same cursor, merged.

        Cursors are (parking time, call id) in every cell, so one cursor goes on in all.
        """
        filters: dict[str, Any] = {
            "limit": limit,
            "cursor": cursor,
            "since": since,
            "until": until,
            "risk": risk,
            "tool": tool,
            "tenant": tenant,
        }
        if run_id is not None:
            return self._on_run(run_id, lambda a: a.page(run_id=run_id, **filters))
        pages = self._each(lambda a: [a.page(**filters)])
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

    def approve_run(
        self,
        run_id: str,
        by: str,
        *,
        may: Callable[[ApprovalRequest], ToolqError | None] | None = None,
    ) -> dict[str, CallResult | ToolqError]:
        """``ApprovalStore.approve_run`` in the run's cell."""
        return self._on_run(run_id, lambda a: a.approve_run(run_id, by, may=may))

    def get(self, call_id: str) -> ApprovalRequest:
        """A call as approvers see it, from its cell."""
        return self._on_call(call_id, lambda a: a.get(call_id))

    def audit(self, count: int = 100, after: str | None = None) -> list[AuditEntry]:
        """Every answering cell's audit entries after ``after``, oldest first, at most ``count``."""
        found = self._each(lambda a: a.audit(count, after))
        return sorted(found, key=_stream_order)[:count]

    def approve(
        self,
        call_id: str,
        by: str,
        *,
        arguments: dict[str, Any] | None = None,
        note: str | None = None,
        digest: str | None = None,
        always: bool = False,
    ) -> CallResult:
        """Approve a parked call in its cell."""
        return self._on_call(
            call_id,
            lambda a: a.approve(
                call_id, by, arguments=arguments, note=note, digest=digest, always=always
            ),
        )

    def deny(self, call_id: str, by: str, reason: str = "", *, always: bool = False) -> CallResult:
        """Deny a parked call in its cell."""
        return self._on_call(call_id, lambda a: a.deny(call_id, by, reason, always=always))

    def unknown(self, run_id: str | None = None) -> list[ApprovalRequest]:
        """Calls of unknown outcome of every cell that answers (one run's: its cell's)."""
        if run_id is not None:
            return self._on_run(run_id, lambda a: a.unknown(run_id))
        return self._each(lambda a: a.unknown())

    def decide_run(
        self,
        run_id: str,
        by: str,
        *,
        approve: Sequence[str] = (),
        deny: Mapping[str, str] | None = None,
    ) -> dict[str, CallResult | ToolqError]:
        """Decide several parallel calls of a run, in the run's cell."""
        return self._on_run(run_id, lambda a: a.decide_run(run_id, by, approve=approve, deny=deny))

    def expire_due(self, now: float | None = None, limit: int = 500) -> int:
        """Expire overdue approvals in every cell that answers."""
        return sum(self._each(lambda a: [a.expire_due(now, limit)]))

    def rules(self, run_id: str) -> RunRules:
        """A run's approval rules, from its cell."""
        return self._on_run(run_id, lambda a: a.rules(run_id))

    def set_rules(
        self,
        run_id: str,
        *,
        mode: ApprovalMode | str | None = None,
        approve_tools: Sequence[str] | None = None,
        approval_timeout: float | None = None,
        by: str | None = None,
        principal: str | None = None,
        admin: bool = False,
        tenant: str | None = None,
    ) -> RunRules:
        """Set a run's rules in its cell (a new run's: its home cell)."""
        return self._on_run(
            run_id,
            lambda a: a.set_rules(
                run_id,
                mode=mode,
                approve_tools=approve_tools,
                approval_timeout=approval_timeout,
                by=by,
                principal=principal,
                admin=admin,
                tenant=tenant,
            ),
        )

    def export_state(self, run_id: str) -> dict[str, Any]:
        """A run's approval state, from its cell."""
        return self._on_run(run_id, lambda a: a.export_state(run_id))

    def restore_state(
        self,
        run_id: str,
        state: dict[str, Any],
        *,
        by: str | None = None,
        principal: str | None = None,
        admin: bool = False,
        tenant: str | None = None,
    ) -> RunRules:
        """Restore a saved approval state onto a run, in its cell."""
        return self._on_run(
            run_id,
            lambda a: a.restore_state(
                run_id, state, by=by, principal=principal, admin=admin, tenant=tenant
            ),
        )


def _stream_order(entry: AuditEntry) -> tuple[int, int]:
    ms, _, seq = entry.id.partition("-")
    return int(ms), int(seq or 0)
