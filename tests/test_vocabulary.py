"""One outcome vocabulary: error types are ``errors.py`` codes; "final" is defined once."""

from __future__ import annotations

import inspect
import re
import tokenize
from pathlib import Path

import toolq
from toolq import errors
from toolq.models import (
    FINAL_EVENT_OF,
    FINAL_EVENTS,
    FINAL_STATUSES,
    AdmissionState,
    CallStatus,
    EventType,
)

PACKAGE = Path(toolq.__file__).parent

ERRORS = [
    cls
    for cls in vars(errors).values()
    if inspect.isclass(cls) and issubclass(cls, errors.ToolqError)
]
CODES = {cls.code for cls in ERRORS}

SAME_WORD_ELSEWHERE = {
    ("models.py", "cancelled"),  # CallStatus.CANCELLED, the state (CallCancelledError's code)
    ("workers/maintenance.py", "timeout"),  # the call record's ``timeout`` field
    ("dispatch/approval_client.py", "timeout"),  # httpx's ``timeout`` option
    ("api/mcp_tasks.py", "cancelled"),  # TaskStatus.CANCELLED, an MCP task's status
}
"""Literals that spell an error code but mean something else where they stand."""

STRING = re.compile(r"(?i)[rbuf]*(?P<q>\"\"\"|'''|\"|')(?P<body>.*)(?P=q)", re.S)


def literals(path: Path) -> list[tuple[int, str]]:
    """The string literals of a module (f-strings as written), with their line numbers.

    Read with ``tokenize``, not ``ast``: CPython 3.11.7's ``ast.parse`` can fail with
    "AST constructor recursion depth mismatch" once Playwright or the MCP SDK ran in-process.
    """
    out = []
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            if token.type == tokenize.STRING:
                match = STRING.fullmatch(token.string)
                if match is not None:
                    out.append((token.start[0], match.group("body")))
    return out


def test_every_error_has_its_own_code() -> None:
    assert len(CODES) == len(ERRORS)


def test_no_module_spells_an_error_code_or_audit_refusal_as_a_literal() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where == "errors.py" or where.startswith("results/scripts/"):
            continue  # the codes; the Lua scripts' wrappers spell the scripts' own replies
        for line, value in literals(path):
            if value in CODES and (where, value) not in SAME_WORD_ELSEWHERE:
                found.append(f"{where}:{line} {value!r}")
            if value.startswith("refused:") and where != "models.py":
                found.append(f"{where}:{line} {value!r} (use AuditOutcome.refused)")
    assert not found, "use SomeError.code / AuditOutcome instead:\n" + "\n".join(found)


def test_final_is_one_definition() -> None:
    assert {s for s in CallStatus if s.is_final} == FINAL_STATUSES == set(FINAL_EVENT_OF)
    assert {t for t in EventType if t.is_final} == FINAL_EVENTS == set(FINAL_EVENT_OF.values())
    for status, event in FINAL_EVENT_OF.items():
        assert event.value == f"call.{status.value}"


def test_the_dashboard_gets_the_final_states_from_the_api() -> None:
    final = {s.value for s in FINAL_STATUSES}
    for script in (PACKAGE / "api").glob("*.js"):
        text = script.read_text(encoding="utf-8")
        for listed in re.findall(r"\[([^\[\]]*)\]", text):
            names = set(re.findall(r'"([a-z_]+)"', listed))
            assert names != final, f"{script.name} lists the final states: [{listed}]"
    dashboard = (PACKAGE / "api" / "dashboard.js").read_text(encoding="utf-8")
    assert 'FINAL = new Set((await api("v1/overview?limit=1")).final_states)' in dashboard


def test_the_scripts_write_only_the_admission_states_models_names() -> None:
    lua = Path(toolq.__file__).parent / "results" / "lua"
    text = "\n".join(p.read_text() for p in lua.rglob("*.lua"))
    hsets = [line for line in text.splitlines() if "'HSET'" in line]
    written = {v for line in hsets for v in re.findall(r"'admission',\s*'(\w+)'", line)}
    assert written == {state.value for state in AdmissionState}
