"""PAGE: one page of a sorted-set index after a cursor (``page.lua``)."""

from __future__ import annotations

from typing import Any

from toolq.results.connection import as_text
from toolq.results.runner import Invocation, Script, flag


class Page(Script[list[tuple[str, str]]]):
    """One page of a sorted set after a ``(score, member)`` cursor, as ``(member, score)``."""

    file = "page.lua"

    def __call__(
        self,
        *,
        index: str,
        after: tuple[str, str] | None,
        lo: str,
        hi: str,
        count: int,
        descending: bool,
    ) -> Invocation[list[tuple[str, str]]]:
        """An invocation: KEYS and ARGV as the header of ``page.lua`` lists them.

        ``after``: the cursor's ``(score, member)``, ``None`` from the start; ``lo`` and
        ``hi``: score bounds (``-inf``/``+inf`` for none), as Redis writes scores.
        """
        score, member = after or ("", "")
        return self.invoke(
            keys={"index": index},
            argv={
                "after_score": score,
                "after_member": member,
                "lo": lo,
                "hi": hi,
                "count": count,
                "descending": flag(descending),
            },
        )

    def parse(self, reply: Any) -> list[tuple[str, str]]:
        """``(member, score)`` pairs, in the page's order."""
        flat = [as_text(item) for item in reply]
        return list(zip(flat[::2], flat[1::2], strict=True))


PAGE = Page()
