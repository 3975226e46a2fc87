"""The ``.lua`` files: shipped, headed, keyed only through KEYS, speaking one vocabulary."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import get_args

import pytest

from toolq import errors
from toolq.approvals.store import EXPIRED_RESULT
from toolq.models import (
    AdmissionState,
    AuditOutcome,
    CallStatus,
    EventType,
    Resolution,
    UndoState,
)
from toolq.quotas import LimitKind
from toolq.results import scripts
from toolq.results.runner import Script, lua_source
from toolq.results.scripts.calls import GROUPED
from toolq.results.undos import WORKER_LOST

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "toolq" / "results" / "lua"
BY_FILE = {script.file: script for script in scripts.ALL}
ERROR_CODES = {
    cls.code
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.ToolqError)
}


def body(script: Script[object]) -> str:
    """The script's own file, without comments."""
    return re.sub(r"--[^\n]*", "", lua_source(script.file))


def test_every_lua_file_has_one_wrapper_and_is_package_data():
    files = {p.name for p in LUA.glob("*.lua")}
    assert files == set(BY_FILE)
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["toolq"]
    for path in [*LUA.glob("*.lua"), *LUA.glob("lib/*.lua")]:
        relative = path.relative_to(ROOT / "toolq").as_posix()
        assert any(fnmatch(relative, p) for p in patterns), relative


@pytest.mark.parametrize("script", scripts.ALL, ids=lambda s: s.name)
def test_header_names_every_key_and_argument_bound_at_the_top(script: Script[object]):
    text = lua_source(script.file)
    header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
    assert re.search(r"^-- KEYS\n(.|\n)*^-- ARGV\n(.|\n)*^-- Returns", header, re.M), script.file
    used_keys = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", body(script))}
    assert used_keys == set(range(1, len(script.header.keys.names) + 1)), script.file
    used_args = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", body(script))}
    assert used_args <= set(range(1, len(script.header.argv.names) + 1)), script.file
    # KEYS and ARGV are read only where they are bound to named locals, at the top
    for line in body(script).splitlines():
        if "KEYS[" in line or re.search(r"ARGV\[\d", line):
            assert line.startswith(("local ", "  KEYS[")), line


NAMES_KEYS_FROM_RECORDS = {scripts.ADMIT, scripts.COOL}
"""ADMIT finds its calls in the backlogs its lane names: it reaches their records (prefix
from ``Keys.call_prefix``), limits' sets and run streams through names the lane and the
records hold (docs: guide/fair-share.md). COOL reads the state of every call its run's
list names (prefix from ``Keys.call_prefix``) and writes only its KEYS. Every other script
is keyed through KEYS."""


@pytest.mark.parametrize(
    "script", [s for s in scripts.ALL if s not in NAMES_KEYS_FROM_RECORDS], ids=lambda s: s.name
)
def test_no_script_builds_a_key_name(script: Script[object]):
    # Every key a command touches is a local bound from KEYS (or a lib parameter fed one).
    source = body(script)
    bound = set(re.findall(r"local ([\w, ]+) =\s*\n?\s*KEYS", source))
    names = {n.strip() for group in bound for n in group.split(",")}
    for command, target in re.findall(r"redis\.call\('(\w+)', ([^,)]+)", source):
        if command in ("PUBLISH", "SCRIPT"):
            continue
        assert target in names, f"{script.file}: {command} {target}"
    assert ".." not in re.sub(r"'\{[^']*'\s*\.\.\s*\w+\s*\.\.\s*'\}'", "", source), script.file


@pytest.mark.parametrize("script", scripts.ALL, ids=lambda s: s.name)
def test_returned_words_are_the_wrappers_outcomes(script: Script[object]):
    returned = set(re.findall(r"return \{?'([a-z_:]+)'", body(script)))
    returned |= {"timeout", "failed"} if script is scripts.RECOVER else set()  # {outcome}
    assert returned == set(script.outcomes), script.file


def test_states_events_and_error_types_come_from_models_and_errors():
    statuses = {s.value for s in CallStatus}
    undo_states = {s.value for s in UndoState}
    event_types = {e.value for e in EventType}
    decisions = set(get_args(scripts.DecisionKind)) | {r.value for r in Resolution}
    admission = {s.value for s in AdmissionState} | set(get_args(LimitKind))
    audit_outcomes = {o.value for o in AuditOutcome}
    seen: dict[str, int] = {}

    def found(kind: str, words: list[str]) -> list[str]:
        seen[kind] = seen.get(kind, 0) + len(words)
        return words

    for script in scripts.ALL:
        source = body(script)
        for etype in found("events", re.findall(r"'(call\.[a-z_]+)'", source)):
            assert etype in event_types, (script.file, etype)
        for status in found("json", re.findall(r'"status":"(\w+)"', source)):
            assert status in statuses, (script.file, status)
        for status in found("status", re.findall(r"'HSET', \w+, 'status', '(\w+)'", source)):
            assert status in statuses, (script.file, status)
        for state in found("undo", re.findall(r"'HSET', \w+, 'undo_state', '(\w+)'", source)):
            assert state in undo_states, (script.file, state)
        for word in found("compared", re.findall(r"[=~]= '([a-z_]+)'", source)):
            # CREATE_GROUP reads the replies of the CREATE it runs per call
            replies = set(scripts.CREATE.outcomes) if script is scripts.CREATE_GROUP else set()
            allowed = statuses | undo_states | decisions | replies | admission | {GROUPED}
            assert word in allowed, (script.file, word)
        for outcome in found("audit", re.findall(r"(?:audit\(|'outcome', )'([a-z:_]+)'", source)):
            assert outcome in audit_outcomes, (script.file, outcome)
        for code in re.findall(r'"error_type":\s*"(\w+)"', source):
            assert code in ERROR_CODES, (script.file, code)
    assert all(seen.get(k) for k in ("events", "json", "status", "undo", "compared", "audit"))
    # the error types the scripts store, passed in as results
    assert {EXPIRED_RESULT["error_type"], WORKER_LOST["error_type"]} <= ERROR_CODES
    assert {"worker_lost", "timeout"} <= ERROR_CODES  # RECOVER's results (CallStore.recover)
