"""``verify_signature`` is for receivers, on a header anyone can send: it says False for a
signature it cannot hold, never raises (``hmac.compare_digest`` refuses non-ASCII str)."""

from __future__ import annotations

import time

from toolq.webhooks.signing import sign, verify_signature


def test_a_non_ascii_signature_is_not_valid_rather_than_an_exception():
    now = int(time.time())
    good = sign("secret", b"{}", now)
    assert verify_signature("secret", good, b"{}", now=now)
    assert verify_signature("secret", f"t={now},v1=\u00e9", b"{}", now=now) is False
    # a hostile v1 beside the good one (a key rotation's two) does not hide the good one
    beside = f"t={now},v1=caf\u00e9," + good.split(",")[1]
    assert verify_signature("secret", beside, b"{}", now=now) is True
