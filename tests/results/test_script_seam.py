"""The seam between a Lua script and its wrapper: KEYS and ARGV filled by the header's names.

Each ``.lua`` header lists its KEYS and ARGV by name; the script binds them to locals of the
same names, and its wrapper fills them by those names, in that order. A wrapper that swaps
two names, leaves one out or adds one is refused before anything is sent.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass
from enum import Enum
from inspect import Parameter, signature
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pytest

from tests.results.conftest import KEYS
from toolq.keys import Keys
from toolq.results import scripts
from toolq.results.runner import Header, Invocation, Script, Slots, lua_source
from toolq.results.scripts.calls import Progress


def bound_locals(script: Script[Any]) -> dict[str, dict[int, str]]:
    """The locals the script's top binds from KEYS[i] and ARGV[i], by section and number."""
    source = re.sub(r"--[^\n]*", "", lua_source(script.file))
    found: dict[str, dict[int, str]] = {"KEYS": {}, "ARGV": {}}
    for names, values in re.findall(r"^local ([\w, ]+?) =\s*\n?\s*([^\n]+)", source, re.M):
        for name, value in zip(names.split(","), values.split(", "), strict=False):
            slot = re.search(r"\b(KEYS|ARGV)\[(\d+)\]", value)
            if slot:
                found[slot[1]][int(slot[2])] = name.strip()
    return found


@pytest.mark.parametrize("script", scripts.ALL, ids=lambda s: s.name)
def test_header_names_are_the_scripts_own_locals(script: Script[Any]):
    bound = bound_locals(script)
    for title, slots in (("KEYS", script.header.keys), ("ARGV", script.header.argv)):
        named = [bound[title].get(n) for n in range(1, len(slots.names) + 1)]
        assert named == list(slots.names), (script.file, title)
        beyond = {n for n in bound[title] if n > len(slots.names)}
        assert not beyond, f"{script.file}: {title} {beyond} bound but not in the header"


def sample(hint: Any, name: str, full: bool) -> Any:
    """A value of the type ``hint``: ``full`` fills optional values, else leaves them None."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        return sample(options[0], name, full) if full else None
    if hint is Keys:
        return KEYS
    if hint is bool:
        return True
    if hint in (int, float):
        return hint(7)
    if hint is str:
        return f"{name}-value"
    if origin is tuple:
        return tuple(sample(a, f"{name}{i}", full) for i, a in enumerate(get_args(hint)))
    if origin is dict:
        return {"field": "value"}
    if origin in (list, Sequence):
        return [sample(get_args(hint)[0], f"{name}0", full)]
    if origin is Literal:
        return get_args(hint)[0]
    if isinstance(hint, type) and issubclass(hint, Enum):
        return next(iter(hint))
    if isinstance(hint, type) and is_dataclass(hint):
        hints = get_type_hints(hint)
        return hint(**{f.name: sample(hints[f.name], f.name, full) for f in fields(hint)})
    raise AssertionError(f"no sample for {name}: {hint}")


SPECIAL: dict[str, Any] = {
    "entry": {f: f for f in ("call_id", "run_id", "tool", "by", "outcome", "ts")},
    "messages": [("t13:queue:safe", "m1"), ("t13:queue:safe", "m2")],
    "schedules": [None, ("backlog", "lane")],
}


def arguments(script: Script[Any], full: bool) -> dict[str, Any]:
    """Keyword arguments for the wrapper: every parameter, or only those without a default."""
    hints = get_type_hints(type(script).__call__)
    chosen: dict[str, Any] = {}
    for name, parameter in signature(script).parameters.items():
        if not full and parameter.default is not Parameter.empty:
            continue
        if name == "members":
            create = scripts.CREATE(**arguments(scripts.CREATE, full))
            chosen[name] = [("c1", 1, create), ("c2", 0, create)]
        elif name in SPECIAL:
            chosen[name] = SPECIAL[name]
        else:
            chosen[name] = sample(hints[name], name, full)
    return chosen


def filled(script: Script[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The names the wrapper fills KEYS and ARGV by, and its tails, as ``invoke`` got them."""
    seen: dict[str, Any] = {}
    invoke = script.invoke

    def spy(
        keys: Mapping[str, str],
        argv: Mapping[str, Any],
        *,
        extra_keys: Sequence[str] = (),
        extra_argv: Sequence[Any] = (),
    ) -> Invocation[Any]:
        seen.update(keys=tuple(keys), argv=tuple(argv), tails=(bool(extra_keys), bool(extra_argv)))
        return invoke(keys, argv, extra_keys=extra_keys, extra_argv=extra_argv)

    script.invoke = spy  # type: ignore[method-assign]
    try:
        invocation = script(**kwargs)  # type: ignore[operator]
    finally:
        del script.invoke
    header = script.header
    assert len(invocation.keys) >= len(header.keys.names)
    assert len(invocation.args) >= len(header.argv.names)
    return seen


def assert_seam(script: Script[Any], kwargs: Mapping[str, Any]) -> None:
    header = script.header
    seen = filled(script, kwargs)
    assert seen["keys"] == header.keys.names, f"{script.file} KEYS"
    assert seen["argv"] == header.argv.names, f"{script.file} ARGV"
    keys_tail, argv_tail = seen["tails"]
    assert header.keys.tail or not keys_tail, f"{script.file} KEYS has no tail"
    assert header.argv.tail or not argv_tail, f"{script.file} ARGV has no tail"


@pytest.mark.parametrize("full", [True, False], ids=["all_arguments", "defaults"])
@pytest.mark.parametrize("script", scripts.ALL, ids=lambda s: s.name)
def test_every_wrapper_fills_its_headers_names_in_order(script: Script[Any], full: bool):
    assert_seam(script, arguments(script, full))


def test_a_decision_is_decides_argv_by_name():
    names = tuple(f.name for f in fields(scripts.Decision))
    assert names == scripts.DECIDE.header.argv.names


class SwappedProgress(Progress):
    """PROGRESS with its ARGV ``etype`` and ``data`` filled the wrong way round."""

    def __call__(self, **kw: Any) -> Invocation[scripts.ProgressOutcome]:  # type: ignore[override]
        return self.invoke(
            keys={"call": "c", "stream": "s", "hook_types": "h", "outbox": "o", "archive": "a"},
            argv={
                "call_id": kw["call_id"],
                "token": kw["token"],
                "data": kw["data"],
                "etype": kw["etype"],
                "maxlen": kw["maxlen"],
                "now": kw["now"],
                "run_id": kw["run_id"],
            },
        )


def test_a_wrapper_with_two_names_swapped_is_refused():
    swapped = SwappedProgress()
    kwargs = arguments(scripts.PROGRESS, full=True)
    with pytest.raises(TypeError, match=r"progress\.lua ARGV: 'data' is given where the header"):
        assert_seam(swapped, kwargs)
    assert_seam(scripts.PROGRESS, kwargs)


def test_a_missing_an_unknown_or_an_extra_name_is_refused():
    keys = {"call": "c", "stream": "s", "hook_types": "h", "outbox": "o", "archive": "a"}
    argv = dict.fromkeys(scripts.PROGRESS.header.argv.names, "x")
    assert scripts.PROGRESS.invoke(keys, argv).args == ("x",) * 7
    with pytest.raises(TypeError, match=r"progress\.lua KEYS: 'outbox' is missing"):
        scripts.PROGRESS.invoke({k: v for k, v in keys.items() if k != "outbox"}, argv)
    with pytest.raises(TypeError, match=r"progress\.lua ARGV: 'ttl' is not in its header"):
        scripts.PROGRESS.invoke(keys, {**argv, "ttl": 1})
    with pytest.raises(TypeError, match=r"progress\.lua ARGV: its header lists no variadic"):
        scripts.PROGRESS.invoke(keys, argv, extra_argv=["field", "value"])


def test_a_header_entry_without_a_name_of_its_own_does_not_parse():
    good = "-- KEYS\n--   1 call  its record\n-- ARGV\n--   1 call_id  its id\n--   2..  pairs\n"
    assert Header.parse("x.lua", good) == Header(Slots(("call",)), Slots(("call_id",), True))
    for bad in (
        "--   1 call_id   2 now (s)\n",  # two entries on one line
        "--   1 call_id\n--   3 now\n",  # a number skipped
        "--   1 (s)\n",  # no name
        "--   1 now\n--   2 now\n",  # a name twice
    ):
        with pytest.raises(ValueError, match=r"x\.lua: ARGV"):
            Header.parse("x.lua", f"-- KEYS\n--   1 call  its record\n-- ARGV\n{bad}")
