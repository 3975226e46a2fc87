"""How long ago a lost worker stopped, as ``/healthz`` and ``toolq check`` say it.

In a drill a worker was SIGKILLed at 21:22:38; at 21:22:58 ``toolq check`` said it
"stopped without a clean shutdown about 7s ago", and about 2s ago at 21:22:54. The age
is counted from when its heartbeat key *expired* (last beat + 3 periods), not from its
last heartbeat, so it reads up to 15 s too recent: an on-call person correlating with
``dmesg`` or supervisor logs looks at the wrong moment.
"""

from __future__ import annotations

import json
import re

from toolq.workers.health import lost_checks


def test_worker_lost_age_counts_from_its_last_heartbeat() -> None:
    now = 1_000_000.0
    entry = json.dumps({"at": now - 20.0, "ttl": 15, "queues": ["toolq.safe"]})
    (check,) = lost_checks({"w1@host": entry}, alive=set(), now=now)
    said = re.search(r"about (\d+)s ago", check.reason or "")
    assert said, check.reason
    # Its last sign of life was 20 s ago; it stopped at most one heartbeat after that.
    assert int(said.group(1)) >= 15, check.reason
