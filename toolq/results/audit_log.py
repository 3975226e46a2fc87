"""``AuditLog``: the audit stream, appended only through ``lib/audit.lua`` and read as a chain.

Lua writers (DECIDE, EXPIRE, REFUSE) call ``audit_append`` of ``lib/audit.lua`` inside their
own script; every entry written from Python goes through ``AuditLog.append`` (the AUDIT
script, which calls the same function). So one function assigns every ``seq``, ``prev`` and
``hash`` (``toolq.results.audit_chain``), atomically with the entry.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import redis

from toolq.keys import Keys
from toolq.results.audit_chain import GENESIS, ChainHead, ChainReport, ChainStart, verify_chain
from toolq.results.connection import as_text
from toolq.results.runner import Scripts
from toolq.results.scripts.audit import AUDIT

PAGE = 1000
"""Entries read per ``XRANGE`` when walking the stream."""


class Archived(Protocol):
    """Audit entries a history store archived, for the chain check (``HistoryStore``)."""

    def entries(self) -> Iterator[tuple[str, dict[str, str]]]:
        """Every archived entry, ``(stream id, fields)``, in stream order."""
        ...

    def mark(self) -> str | None:
        """The stream id of the last entry archived (None: none yet)."""
        ...

    def start(self) -> ChainStart:
        """Where the archive's chain starts: seq 1, or the checkpoint retention left."""
        ...


class AuditLog:
    """Appends audit entries as links of the chain, and reads the stream and its state."""

    def __init__(
        self, client: redis.Redis, keys: Keys, maxlen: int, scripts: Scripts | None = None
    ) -> None:
        self.redis = client
        self.keys = keys
        self.maxlen = maxlen
        self.scripts = scripts or Scripts(client)

    def append(self, fields: dict[str, str]) -> str:
        """Append one entry (fields in stored order; no ``seq``/``prev``/``hash``); its id."""
        return self.scripts.run(AUDIT(keys=self.keys, fields=fields, audit_maxlen=self.maxlen))

    def entries(self, after: str = "-", until: str = "+") -> Iterator[tuple[str, dict[str, str]]]:
        """The entries after the stream id ``after`` (``-``: all) up to ``until``, as text."""
        start = after if after == "-" else f"({after}"
        while True:
            page: Any = self.redis.xrange(self.keys.audit_stream, min=start, max=until, count=PAGE)
            if not page:
                return
            for entry_id, raw in page:
                yield as_text(entry_id), {as_text(k): as_text(v) for k, v in raw.items()}
            start = f"({as_text(page[-1][0])}"

    def last(self) -> dict[str, str] | None:
        """The newest entry's fields (None: the stream is empty)."""
        newest: Any = self.redis.xrevrange(self.keys.audit_stream, count=1)
        if not newest:
            return None
        return {as_text(k): as_text(v) for k, v in newest[0][1].items()}

    def state(self) -> tuple[ChainStart, ChainHead | None, str]:
        """The chain's start (a trim's checkpoint, or seq 1), head, and the stream's last id.

        All three are read at once: entries appended later are not the head's.
        """
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(self.keys.audit_chain)
        pipe.xrevrange(self.keys.audit_stream, count=1)
        raw, last = pipe.execute()
        state = {as_text(k): as_text(v) for k, v in raw.items()}
        start = ChainStart()
        if "first_seq" in state:
            start = ChainStart(int(state["first_seq"]), state.get("first_prev", GENESIS))
        head = ChainHead(int(state["seq"]), state.get("hash", "")) if "seq" in state else None
        return start, head, as_text(last[0][0]) if last else "-"

    def verify(
        self,
        source: str = "",
        anchors: Mapping[int, str] | None = None,
        archived: Archived | None = None,
    ) -> ChainReport:
        """Check the stream's chain from its start to the head recorded when it is read.

        ``anchors``: the hashes signed anchors name, by seq (``toolq.approvals.audit``).
        ``archived``: the entries a history store holds (``Archived``); the chain is then
        checked from the archive's start through the archive and on into the stream's
        entries after the last one archived.
        """
        start, head, last = self.state()
        if archived is not None:
            mark = archived.mark()
            tail = self.entries(after=mark or "-", until=last) if last != "-" else iter(())
            joined = itertools.chain(archived.entries(), tail)
            return verify_chain(joined, archived.start(), head, source, anchors)
        entries = self.entries(until=last) if last != "-" else iter(())
        first = next(entries, None)
        if first is not None and first[1].get("seq", "").isdigit():
            trimmed, _, _ = self.state()  # the cap may have trimmed since the state was read
            if trimmed.seq == int(first[1]["seq"]) > start.seq:
                start = trimmed
        walk = itertools.chain([first], entries) if first is not None else entries
        report = verify_chain(walk, start, head, source, anchors)
        if any(p.kind == "deleted" for p in report.problems):
            # A slow reader can be overtaken by the cap: entries it had not reached yet were
            # trimmed, and the checkpoint moved past them. Those were not deleted.
            now, _, _ = self.state()
            report.problems = [
                p
                for p in report.problems
                if not (p.kind == "deleted" and (p.last_seq or p.seq or 0) < now.seq)
            ]
        return report


__all__ = ["Archived", "AuditLog"]
