"""Acknowledgements sent ahead: kombu's ``unacked`` entry removed in toolq's own round trip.

kombu acknowledges a message with one more round trip per message (``MULTI ZREM HDEL
EXEC``), after the task returns. Where the task runs in the process that acknowledges it
(threads and solo pools), the slot sends the same ``ZREM`` and ``HDEL`` behind the FINISH of
the message's last call instead, in the round trip that FINISH takes anyway, and marks the
tag ``sent``; kombu's acknowledgement of it (``toolq.broker.app``) then only updates its own
memory. A prefork child does the same and tells its parent, which acknowledges the message,
by its task's return value (``carried``). Redis runs a connection's commands in order: the
entry never goes before the FINISH written ahead of it, and an entry is only of use to
recovery while its calls are ``queued`` (``Maintenance.resend_stranded``). A process killed
before that round trip leaves the entry and the call's lease, as a process killed before
kombu's acknowledgement does.
"""

from __future__ import annotations

import threading
from typing import Any

from toolq.keys import KOMBU_UNACKED, KOMBU_UNACKED_INDEX

_sent: dict[str, None] = {}
"""Tags removed ahead, oldest first. A tag kombu never acknowledges (its connection lost
in between) would stay: beyond ``_KEPT`` the oldest mark goes, and kombu's acknowledgement
of it, if it ever comes, takes its own round trip (removing nothing, as on a redelivery)."""
_KEPT = 10_000
_lock = threading.Lock()


def commands(delivery_tag: str) -> list[tuple[Any, ...]]:
    """The commands that remove ``delivery_tag``'s entry, as kombu's acknowledgement does."""
    return [("ZREM", KOMBU_UNACKED_INDEX, delivery_tag), ("HDEL", KOMBU_UNACKED, delivery_tag)]


def carried(retval: Any) -> bool:
    """Whether a task's return value says its child removed the entry (the task returned True).

    A pool hands the parent a successful task's ``repr`` (Celery's ``fast_trace_task``).
    """
    return retval is True or retval == "True"


def sent(delivery_tag: str) -> None:
    """Redis has run ``commands(delivery_tag)``: kombu's acknowledgement needs no round trip."""
    with _lock:
        _sent[delivery_tag] = None
        if len(_sent) > _KEPT:
            del _sent[next(iter(_sent))]


def take(delivery_tag: str) -> bool:
    """Whether ``delivery_tag``'s entry was removed ahead (once: the mark goes)."""
    with _lock:
        return _sent.pop(delivery_tag, False) is None
