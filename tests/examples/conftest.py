"""Run an example's main() against an in-process worker serving that example's registry."""

from __future__ import annotations

import importlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import InProcess
from toolq import Client, Settings

Runner = Callable[..., tuple[int, ModuleType]]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """The examples' scratch directory; world-traversable, as sandboxed tools run as nobody."""
    path = Path(tempfile.mkdtemp(prefix="toolq-examples-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run_example(
    settings: Settings, inproc: InProcess, shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Runner:
    """``run_example("undoable_edit")`` → (main()'s exit code, the example module)."""
    monkeypatch.setenv("TOOLQ_EXAMPLES_DIR", str(shared_dir))

    def run(name: str) -> tuple[int, ModuleType]:
        module = importlib.import_module(f"examples.{name}")
        inproc.start(app=f"examples.{name}:registry")  # TOOLQ_EXAMPLES_DIR: set above
        with Client(module.registry, settings) as client:
            return module.main(client), module

    return run
