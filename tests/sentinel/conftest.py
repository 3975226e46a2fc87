"""Fixtures of the Sentinel tests: private master/replica/Sentinel groups, stopped by PID."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.chaos.sentinel import SentinelGroup


@pytest.fixture
def make_group(tmp_path: Path) -> Iterator[Callable[..., SentinelGroup]]:
    started: list[SentinelGroup] = []

    def make(replicas: int = 1, sentinels: int = 1) -> SentinelGroup:
        group = SentinelGroup(tmp_path / f"group{len(started)}", replicas, sentinels)
        started.append(group)
        group.start()
        return group

    yield make
    for group in started:
        group.stop()
