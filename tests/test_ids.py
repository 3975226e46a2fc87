"""``new_id``: the ids a dispatch gives its calls and runs have ``uuid4().hex``'s form."""

from __future__ import annotations

import uuid

from toolq.models import new_id


def test_new_id_is_a_uuid4_hex() -> None:
    ids = [new_id() for _ in range(2000)]
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    assert len(set(ids)) == len(ids)
