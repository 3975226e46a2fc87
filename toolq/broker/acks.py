"""Acknowledgements sent ahead: kombu's ``unacked`` entry removed in toolq's own round trip.

kombu acknowledges a message with one more round trip per message (``MULTI ZREM HDEL
EXEC``), after the task returns. Where the task runs in the process that acknowledges it
(threads and solo pools), the slot sends the same ``ZREM`` and ``HDEL`` behind the FINISH of
the message's last call instead, in the round trip that FINISH takes anyway, and marks the
tag ``sent``; kombu's acknowledgement of it (``toolq.broker.app``) then only updates its own
memory. Redis runs a connection's commands in order: the entry never goes before the FINISH
written ahead of it, and an entry is only of use to recovery while its calls are ``queued``
(``Maintenance.resend_stranded``). A process killed before that round trip leaves the entry
and the call's lease, as a process killed before kombu's acknowledgement does.
"""

from __future__ import annotations

from typing import Any

from toolq.keys import KOMBU_UNACKED, KOMBU_UNACKED_INDEX

_sent: set[str] = set()


def commands(delivery_tag: str) -> list[tuple[Any, ...]]:
    """The commands that remove ``delivery_tag``'s entry, as kombu's acknowledgement does."""
    return [("ZREM", KOMBU_UNACKED_INDEX, delivery_tag), ("HDEL", KOMBU_UNACKED, delivery_tag)]


def sent(delivery_tag: str) -> None:
    """Redis has run ``commands(delivery_tag)``: kombu's acknowledgement needs no round trip."""
    _sent.add(delivery_tag)


def take(delivery_tag: str) -> bool:
    """Whether ``delivery_tag``'s entry was removed ahead (once: the mark goes)."""
    try:
        _sent.remove(delivery_tag)
    except KeyError:
        return False
    return True
