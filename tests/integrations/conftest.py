"""The approvers' side of the framework tests (see ``support.Approvers``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import InProcess
from tests.integrations.support import Approvers


@pytest.fixture
def approvers(inproc: InProcess) -> Iterator[Approvers]:
    people = Approvers(inproc)
    yield people
    people.close()
