"""The docs site's generated reference pages match the code, and every setting is described.

``docs/reference/{settings,cli,http}.md`` are written by ``scripts/gen_reference.py``; a
setting, CLI option or endpoint added without re-running it fails here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from toolq.models import EventType
from toolq.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def generator() -> ModuleType:
    path = ROOT / "scripts/gen_reference.py"
    spec = importlib.util.spec_from_file_location("gen_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_has_a_description(name):
    description = Settings.model_fields[name].description
    assert description and description.strip(), (
        f"Settings.{name} has no docstring: write one under the field, it is the "
        "description docs/reference/settings.md shows"
    )


def test_every_setting_is_on_the_settings_page():
    page = (DOCS / "reference/settings.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `(TOOLQ_[A-Z0-9_]+)` \|", page, re.M))
    expected = {f"TOOLQ_{name.upper()}" for name in Settings.model_fields}
    assert expected - rows == set(), "run python scripts/gen_reference.py"
    assert rows - expected == set(), "the page lists settings that no longer exist"


def test_generated_pages_are_current():
    stale = generator().stale()
    assert stale == [], f"{stale} differ from the code: run python scripts/gen_reference.py"


def test_settings_page_shows_type_default_and_description():
    page = (DOCS / "reference/settings.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `TOOLQ_LEASE_SECONDS`"))
    assert "`float`" in row and "`30.0` (> 0)" in row and "Execution lease" in row


def test_every_event_type_is_on_the_events_page():
    page = (DOCS / "reference/events.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^## `(call\.[a-z_]+)`", page, re.M))
    assert headings == {e.value for e in EventType}


def test_readme_is_short_and_its_links_into_the_site_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    targets = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", readme)
    assert targets, "the README links into the docs site"
    missing = [t for t in targets if not (ROOT / t).is_file()]
    assert missing == []


def test_python_reference_documents_every_public_name():
    import toolq

    page = (DOCS / "reference/python.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: toolq\.(\w+)$", page, re.M))
    assert documented == set(toolq.__all__) - {"__version__"}
