"""Helpers the examples share: connecting, a scratch directory, approving."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toolq import Client, Settings, ToolRegistry
from toolq.approvals.models import ApprovalRequest


class ExampleFailed(Exception):
    """Something the example expected did not happen."""


def expect(condition: bool, message: str) -> None:
    """Stop the example with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ExampleFailed(message)


def example_dir(name: str) -> Path:
    """A scratch directory the script and the workers both see.

    ``$TOOLQ_EXAMPLES_DIR/<name>`` (default: the system temp dir), read when called so the
    worker processes and the script agree as long as they share the environment.
    """
    base = os.environ.get("TOOLQ_EXAMPLES_DIR") or os.path.join(
        tempfile.gettempdir(), "toolq-examples"
    )
    path = Path(base) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def connect(registry: ToolRegistry, client: Client | None) -> Iterator[Client]:
    """Use the given client, or one for ``toolq.Settings()`` (``TOOLQ_REDIS_URL``)."""
    if client is not None:
        yield client
        return
    with Client(registry, Settings()) as own:
        yield own


def run(example: Any, client: Client) -> int:
    """Run ``example(client)``; 0 when it completes, 1 (with the reason) when it fails."""
    try:
        example(client)
    except ExampleFailed as exc:
        print(f"FAILED: {exc}")
        return 1
    print("done.")
    return 0


def show(label: str, value: Any) -> None:
    """Print a labelled value as indented JSON."""
    text = json.dumps(value, indent=2, default=str, ensure_ascii=False)
    print(f"{label}: {text}")


def parked(client: Client, call_id: str, *, preview: bool = False) -> ApprovalRequest:
    """The approval request of a parked call; with ``preview``, once its preview is ready."""
    deadline = time.monotonic() + 30
    while True:
        request = client.approvals.get(call_id)
        ready = request.preview is not None or request.preview_error is not None
        if not preview or ready:
            return request
        expect(time.monotonic() < deadline, f"no preview for call {call_id} after 30s")
        time.sleep(0.05)
