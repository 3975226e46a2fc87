from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace the sandbox user (nobody, when tests run as root) can enter and read.

    Not under pytest's tmp_path: its parent is private to root.
    """
    root = Path(tempfile.mkdtemp(prefix="toolq-ws-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)
