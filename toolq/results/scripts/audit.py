"""The audit entries written in Python: AUDIT (``audit.lua``, through ``lib/audit.lua``)."""

from __future__ import annotations

from typing import Any

from toolq.keys import Keys
from toolq.results.connection import as_text
from toolq.results.runner import Invocation, Script


class Audit(Script[str]):
    """One audit entry appended as the next link of the chain (``audit.lua``)."""

    file = "audit.lua"
    includes = ("audit",)

    def __call__(self, *, keys: Keys, fields: dict[str, str], audit_maxlen: int) -> Invocation[str]:
        """An invocation: KEYS and ARGV as the header of ``audit.lua`` lists them.

        ``fields``: the entry's fields in the order they are stored (``seq``, ``prev`` and
        ``hash`` are added by the script and may not be given).
        """
        flat = [item for pair in fields.items() for item in pair]
        return self.invoke(
            keys={"audit_stream": keys.audit_stream, "audit_chain": keys.audit_chain},
            argv={"audit_maxlen": audit_maxlen},
            extra_argv=flat,
        )

    def parse(self, reply: Any) -> str:
        """The new entry's stream id."""
        return as_text(reply)


AUDIT = Audit()
