r"""The audit stream's hash chain: how an entry's hash is computed, and a verifier of a chain.

Every audit entry is appended by ``lib/audit.lua`` with three fields of the chain:

- ``seq``: 1, 2, 3, ... (one counter, never reused);
- ``prev``: the ``hash`` of the entry with the seq before (forty zeros for seq 1);
- ``hash``: ``SHA1(prev + "\n" + C)`` in lowercase hex, where ``C`` is the entry's fields
  but ``prev`` and ``hash`` (so ``seq`` is in it), sorted by name in byte order, each as
  ``<byte length of name>:<name><byte length of value>:<value>`` (UTF-8 text as stored).

The verifier is source-agnostic: ``ChainVerifier.feed`` takes ``(stream_id, fields)`` in
append order from anything that kept the entries as written (the Redis stream, an archive
in SQL). A source that holds an older part of the chain is fed first, then the stream:
``verify_chain(itertools.chain(archived, stream_entries), start, head)``. When retention
has deleted a prefix, ``start`` names the first kept seq and its ``prev`` (a checkpoint
recorded when the prefix was dropped) and the report says the chain was checked from there.

What it detects: an entry deleted (a seq missing, or a ``prev`` that does not match), altered
(its hash does not match its fields, or the next entry's ``prev`` does not match its hash),
reordered (a seq that comes after a later one) or forged (no chain fields, a repeated seq, or
past the recorded head) by anyone who does not recompute the chain. Whoever holds Redis
credentials can recompute it: the per-entry signatures of deciding processes are what keeps
a forged decision entry from verifying, and signed anchors (entries whose signed ``digest``
names a seq and its hash) are what shows a recomputed chain up to the last anchor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

GENESIS = "0" * 40
"""``prev`` of the entry with seq 1."""
CHAIN_FIELDS = ("seq", "prev", "hash")
"""The fields ``lib/audit.lua`` adds to every entry."""

ProblemKind = Literal["deleted", "altered", "reordered", "forged"]


def canonical(fields: Mapping[str, str]) -> bytes:
    """``C``: the fields but ``prev`` and ``hash``, by name in byte order, length-prefixed."""
    items = sorted(
        (name.encode(), value.encode())
        for name, value in fields.items()
        if name not in ("prev", "hash")
    )
    return b"".join(b"%d:%s%d:%s" % (len(name), name, len(value), value) for name, value in items)


def entry_hash(prev: str, fields: Mapping[str, str]) -> str:
    """The hash an entry with these fields (``seq`` among them) has after ``prev``."""
    return hashlib.sha1(prev.encode() + b"\n" + canonical(fields)).hexdigest()


@dataclass(frozen=True)
class ChainStart:
    """Where a chain is checked from: the first seq expected and the ``prev`` it must carry."""

    seq: int = 1
    prev: str = GENESIS


@dataclass(frozen=True)
class ChainHead:
    """The last link as the writer recorded it (the chain's state key): ``seq`` and ``hash``."""

    seq: int
    hash: str


class ChainProblem(BaseModel):
    """One break of the chain: which kind, at which seq and stream id."""

    kind: ProblemKind
    seq: int | None = None
    """The seq concerned (the first of a deleted range)."""
    last_seq: int | None = None
    """The last seq of a deleted range."""
    stream_id: str | None = None
    detail: str = ""


class ChainReport(BaseModel):
    """What ``ChainVerifier`` found."""

    source: str = ""
    """Which stream (or archive) was checked, e.g. ``cell 0``."""
    entries: int = 0
    """Entries carrying chain fields."""
    unchained: int = 0
    """Entries before the first chained one that carry no chain fields (written before the
    chain existed): not covered by the chain, and not counted as problems."""
    start_seq: int = 1
    start_prev: str = GENESIS
    from_checkpoint: bool = False
    """True when the chain was checked from a recorded checkpoint, not from seq 1."""
    last_seq: int = 0
    anchored_seq: int = 0
    """The highest seq a signed anchor vouches for (0: none); entries after it are covered
    only by the chain, which whoever holds Redis credentials can recompute."""
    head_checked: bool = False
    """True when the last entry was compared with the writer's recorded head."""
    problems: list[ChainProblem] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing was deleted, altered, reordered or forged."""
        return not self.problems

    def count(self, kind: ProblemKind) -> int:
        """The problems of one kind (a deleted range counts its entries)."""
        return sum(
            (p.last_seq or p.seq or 0) - (p.seq or 0) + 1 if kind == "deleted" else 1
            for p in self.problems
            if p.kind == kind
        )

    @property
    def unanchored(self) -> int:
        """Entries after the last one a signed anchor vouches for."""
        return self.last_seq - self.anchored_seq


class ChainVerifier:
    """Checks entries fed in append order against the chain; ``finish`` gives the report.

    Memory stays small whatever the length: the last link, the ranges of seqs missing so far
    and the hashes next to them (to check entries that come back out of order).
    """

    def __init__(
        self,
        start: ChainStart | None = None,
        source: str = "",
        anchors: Mapping[int, str] | None = None,
    ) -> None:
        begin = start or ChainStart()
        self.anchors = dict(anchors or {})
        """Hashes that signed anchors name, by seq: a recomputed chain does not match them."""
        self.report = ChainReport(
            source=source,
            start_seq=begin.seq,
            start_prev=begin.prev,
            from_checkpoint=start is not None and (begin.seq, begin.prev) != (1, GENESIS),
        )
        self.top = begin.seq - 1
        """The highest seq seen (``start - 1`` before any)."""
        self.top_hash = begin.prev
        self.missing: list[tuple[int, int]] = []
        self.hash_before: dict[int, str] = {}
        """For a seq missing when a later entry came: the hash its successor names (prev)."""
        self.next_id: dict[int, str] = {}
        """For a seq missing when a later entry came: that entry's stream id."""
        self.prev_of: dict[int, str] = {}
        """For a seq missing just after a seen entry: that entry's hash (its prev)."""

    def _problem(self, kind: ProblemKind, seq: int | None, stream_id: str, detail: str) -> None:
        self.report.problems.append(
            ChainProblem(kind=kind, seq=seq, stream_id=stream_id, detail=detail)
        )

    def feed(self, stream_id: str, raw: Mapping[str, str] | Mapping[bytes, bytes]) -> None:
        """Check one entry (fields as stored, text or bytes)."""
        fields = {_text(k): _text(v) for k, v in raw.items()}
        report = self.report
        if not all(name in fields for name in CHAIN_FIELDS):
            if report.entries == 0 and not report.from_checkpoint:
                report.unchained += 1
            else:
                self._problem("forged", None, stream_id, "an entry without chain fields")
            return
        try:
            seq = int(fields["seq"])
        except ValueError:
            self._problem("forged", None, stream_id, f"seq {fields['seq']!r} is not a number")
            return
        report.entries += 1
        stored, prev = fields["hash"], fields["prev"]
        if entry_hash(prev, fields) != stored:
            self._problem("altered", seq, stream_id, "its fields do not match its hash")
        if seq in self.anchors:
            if self.anchors[seq] != stored:
                detail = "its hash is not the one a signed anchor names (a recomputed chain)"
                self._problem("altered", seq, stream_id, detail)
            report.anchored_seq = max(report.anchored_seq, seq)
        if seq == self.top + 1:
            if prev != self.top_hash:
                self._break(seq, stream_id)
            self._advance(seq, stored)
        elif seq > self.top + 1:
            self.missing.append((self.top + 1, seq - 1))
            self.next_id[seq - 1] = stream_id
            self.prev_of[self.top + 1] = self.top_hash
            self.hash_before[seq - 1] = prev
            self._advance(seq, stored)
        elif self._take(seq):
            self._problem(
                "reordered", seq, stream_id, f"appended after seq {self.top}, not before it"
            )
            if seq in self.prev_of and self.prev_of.pop(seq) != prev:
                self._problem("altered", seq, stream_id, "its prev is not the hash before it")
            if seq in self.hash_before and self.hash_before.pop(seq) != stored:
                self._problem("altered", seq, stream_id, "the next entry names another hash")
        else:
            self._problem("forged", seq, stream_id, "a seq already used (or before the start)")

    def _advance(self, seq: int, stored: str) -> None:
        self.top, self.top_hash = seq, stored
        self.report.last_seq = seq

    def _break(self, seq: int, stream_id: str) -> None:
        if seq == self.report.start_seq:
            detail = "its prev is not the start's (seq 1's zeros, or the checkpoint's)"
            self._problem("altered", seq, stream_id, detail)
        else:
            detail = f"seq {seq - 1} was rewritten: seq {seq}'s prev is not its hash"
            self._problem("altered", seq - 1, stream_id, detail)

    def _take(self, seq: int) -> bool:
        """Remove ``seq`` from the missing ranges; False if it was not missing."""
        for i, (lo, hi) in enumerate(self.missing):
            if lo <= seq <= hi:
                pieces = [(a, b) for a, b in ((lo, seq - 1), (seq + 1, hi)) if a <= b]
                self.missing[i : i + 1] = pieces
                return True
        return False

    def finish(self, head: ChainHead | None = None) -> ChainReport:
        """The report, after comparing the last entry with the recorded ``head`` if given."""
        report = self.report
        if head is not None and head.seq > 0:
            report.head_checked = True
            if head.seq > self.top:
                self.missing.append((self.top + 1, head.seq))
            elif head.seq < self.top:
                detail = f"entries after the recorded head (seq {head.seq})"
                report.problems.append(
                    ChainProblem(kind="forged", seq=head.seq + 1, last_seq=self.top, detail=detail)
                )
            elif head.hash != self.top_hash:
                detail = "the last entry is not the recorded head"
                report.problems.append(ChainProblem(kind="altered", seq=self.top, detail=detail))
        for lo, hi in self.missing:
            detail = "missing" if lo == hi else f"{hi - lo + 1} entries missing"
            if hi in self.next_id:
                detail += f", before the entry {self.next_id[hi]}"
            else:
                detail += ", at the end (after the last entry)"
            report.problems.append(
                ChainProblem(
                    kind="deleted",
                    seq=lo,
                    last_seq=hi,
                    stream_id=self.next_id.get(hi),
                    detail=detail,
                )
            )
        self.missing = []
        return report


def verify_chain(
    entries: Iterable[tuple[str, Mapping[str, str] | Mapping[bytes, bytes]]],
    start: ChainStart | None = None,
    head: ChainHead | None = None,
    source: str = "",
    anchors: Mapping[int, str] | None = None,
) -> ChainReport:
    """Check ``(stream_id, fields)`` pairs in append order; see the module docstring.

    ``anchors``: the hash each signed anchor names, by seq (checked by the caller's verifier).
    """
    verifier = ChainVerifier(start, source, anchors)
    for stream_id, fields in entries:
        verifier.feed(stream_id, fields)
    return verifier.finish(head)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


__all__ = [
    "CHAIN_FIELDS",
    "GENESIS",
    "ChainHead",
    "ChainProblem",
    "ChainReport",
    "ChainStart",
    "ChainVerifier",
    "canonical",
    "entry_hash",
    "verify_chain",
]
