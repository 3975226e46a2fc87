"""The on-call commands (calls, runs, bulk approve, tail, dispatch --wait), as subprocesses."""

from __future__ import annotations

import re

import pytest

from tests.cli.test_cli import toolq

pytestmark = pytest.mark.e2e

APP = ("--app", "tests.apps:registry")


def calls(*specs: tuple[str, dict[str, object]]) -> list[dict[str, object]]:
    return [{"id": f"t{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(specs)]


def test_tail_prints_one_readable_line_per_event(settings, inproc, client):
    inproc.start()
    batch = client.dispatch(calls(("echo", {"text": "hi"}), ("boom", {})), run_id="tail-run")
    batch.wait(20)
    done = toolq("tail", "tail-run", settings=settings)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    echo, boom = batch.call_ids
    assert any(
        re.search(rf"tail-run  {echo[:8]}  echo  succeeded  \S+ {{\"text\": \"hi\"}}", x)
        for x in lines
    ), lines
    assert any(f"{boom[:8]}  boom  failed" in x for x in lines), lines
    assert "\x1b[" not in done.stdout  # no colour codes in a pipe
    assert not any(line.startswith("{") for line in lines)
    unknown = toolq("tail", "no-such-run", settings=settings)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.strip().splitlines() == [
        "error: no events for run 'no-such-run': unknown run, or its events expired"
    ]
