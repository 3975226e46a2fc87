"""``Script`` and ``Scripts``: the Lua files of ``toolq/results/lua``, run one way.

Each file's header lists its KEYS and ARGV by name (``Header``); a wrapper fills them by
those names, and an invocation whose names differ from the header's, or come in another
order, is refused before it is sent: no slot is filled by its position alone.

A script's SHA1 is computed here from its source, so nothing is registered ahead: every
script runs with ``EVALSHA``, and a ``NOSCRIPT`` reply (Redis restarted, or its scripts were
flushed) loads the script and runs that invocation again. A script Redis lacked ran nowhere,
so the retry cannot apply it twice. The pooled client always sends a pipeline (of one, or
many invocations: one round trip either way); the worker's hot path sends the same
``EVALSHA`` on a connection of its thread's own (``DirectScripts``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, ClassVar, Generic, TypeVar, get_args

import redis
from redis.exceptions import NoScriptError

from toolq.keys import Keys
from toolq.results.connection import as_text
from toolq.results.direct import DirectScripts

R = TypeVar("R")
W = TypeVar("W", bound=str)


@dataclass(frozen=True)
class Reply(Generic[W]):
    """A script's outcome word and the value its reply carries after it (``""``: none)."""

    outcome: W
    value: str = ""


@cache
def lua_source(name: str) -> str:
    """The text of ``toolq/results/lua/<name>`` (package data)."""
    return (resources.files("toolq.results") / "lua" / name).read_text(encoding="utf-8")


_ENTRY = re.compile(r"^--\s{2,}(\d+)(\.\.)?\s+(\S.*)$")
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_SECOND_ENTRY = re.compile(r"\s{2,}\d+(\.\.)?\s")


@dataclass(frozen=True)
class Slots:
    """One section of a header: its names in order, and whether a variadic tail follows."""

    names: tuple[str, ...]
    tail: bool = False


@dataclass(frozen=True)
class Header:
    """The KEYS and ARGV a script's header lists, by name, in order.

    A section is the lines under ``-- KEYS`` (or ``-- ARGV``) indented by two spaces or
    more; an entry is ``N  name  description``, numbered from 1, one per line, and
    ``N..  description`` is a variadic tail (``N`` follows the last name).
    """

    keys: Slots
    argv: Slots

    @classmethod
    def parse(cls, file: str, source: str) -> Header:
        """The header of ``source`` (the file ``file``); a malformed one raises ``ValueError``."""
        comments = [line for line in source.splitlines() if line.startswith("--")]
        return cls(_section(file, "KEYS", comments), _section(file, "ARGV", comments))


def _section(file: str, title: str, comments: list[str]) -> Slots:
    try:
        start = comments.index(f"-- {title}") + 1
    except ValueError:
        raise ValueError(f"{file}: its header has no '-- {title}' section") from None
    names: list[str] = []
    tail = False
    for line in comments[start:]:
        if not line.startswith("--  "):
            break
        entry = _ENTRY.match(line)
        if entry is None:
            continue  # a description's continuation
        number, variadic, rest = int(entry[1]), bool(entry[2]), entry[3]
        if tail or number != len(names) + 1:
            raise ValueError(f"{file}: {title} entry {number} is out of order")
        if variadic:
            tail = True
            continue
        name = rest.split()[0]
        if _SECOND_ENTRY.search(rest):
            raise ValueError(f"{file}: {title} {number} shares its line; one entry a line")
        if not _NAME.fullmatch(name) or name in names:
            raise ValueError(f"{file}: {title} {number} needs a name of its own, not {name!r}")
        names.append(name)
    return Slots(tuple(names), tail)


def _placed(script: str, title: str, slots: Slots, given: Mapping[str, Any]) -> tuple[Any, ...]:
    """``given``'s values, after checking its names are the header's, in the header's order."""
    if tuple(given) == slots.names:
        return tuple(given.values())
    names = tuple(given)
    missing = [n for n in slots.names if n not in given]
    unknown = [n for n in names if n not in slots.names]
    if missing:
        problem = f"{missing[0]!r} is missing"
    elif unknown:
        problem = f"{unknown[0]!r} is not in its header"
    else:
        at = next(i for i, (a, b) in enumerate(zip(names, slots.names, strict=True)) if a != b)
        problem = f"{names[at]!r} is given where the header lists {slots.names[at]!r}"
    raise TypeError(f"{script} {title}: {problem} (the header lists {', '.join(slots.names)})")


class Script(Generic[R]):
    """One ``.lua`` file (after the ``lib/`` files it includes) and how to read its reply.

    Subclasses name the file, the libraries and a ``parse``; their ``__call__`` takes
    keyword arguments and returns an ``Invocation`` for ``Scripts`` to run, filling the
    KEYS and ARGV by the names of the file's ``header``.
    """

    file: ClassVar[str]
    includes: ClassVar[tuple[str, ...]] = ()
    outcomes: ClassVar[tuple[str, ...]] = ()
    """The outcome words the script returns (its ``Literal``'s values), if it returns words."""

    def __init__(self) -> None:
        self.source = self.text()
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        self.header = Header.parse(self.file, lua_source(self.file))
        """The KEYS and ARGV the file's header names."""

    def text(self) -> str:
        """The source Redis runs: the included ``lib/`` files, then the script's file."""
        parts = [lua_source(f"lib/{name}.lua") for name in self.includes]
        return "\n".join([*parts, lua_source(self.file)])

    @property
    def name(self) -> str:
        """The script's name (its file without ``.lua``)."""
        return self.file.removesuffix(".lua")

    def parse(self, reply: Any) -> R:
        """The typed outcome of a raw reply: by default its outcome word (``word``)."""
        return self.word(reply)  # type: ignore[no-any-return]

    def word(self, reply: Any) -> Any:
        """The reply's outcome word, one of ``outcomes``: the reply, or its first item."""
        return outcome_word(reply[0] if isinstance(reply, list | tuple) else reply, self)

    def reply(self, reply: Any) -> Reply[Any]:
        """The reply's outcome word and the value after it (``Reply``)."""
        return Reply(self.word(reply), as_text(reply[1]) if len(reply) > 1 else "")

    def invoke(
        self,
        keys: Mapping[str, str],
        argv: Mapping[str, Any],
        *,
        extra_keys: Sequence[str] = (),
        extra_argv: Sequence[Any] = (),
    ) -> Invocation[R]:
        """An invocation of KEYS and ARGV given by the header's names, in the header's order.

        ``extra_keys`` and ``extra_argv`` fill a section's variadic tail. Names that differ
        from the header's, or come in another order, raise ``TypeError``.
        """
        header = self.header
        if extra_keys and not header.keys.tail:
            raise TypeError(f"{self.file} KEYS: its header lists no variadic tail")
        if extra_argv and not header.argv.tail:
            raise TypeError(f"{self.file} ARGV: its header lists no variadic tail")
        return Invocation(
            self,
            (*_placed(self.file, "KEYS", header.keys, keys), *extra_keys),
            (*_placed(self.file, "ARGV", header.argv, argv), *extra_argv),
        )


@dataclass(frozen=True)
class Invocation(Generic[R]):
    """One run of a script: its KEYS and ARGV, ready to send."""

    script: Script[R]
    keys: tuple[str, ...]
    args: tuple[Any, ...]

    @property
    def command(self) -> tuple[Any, ...]:
        """The ``EVALSHA`` command."""
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)


class Scripts:
    """Runs invocations on one client: pipelined on the pool, or on the thread's connection."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self.direct_scripts = DirectScripts(client)

    def run(self, invocation: Invocation[R]) -> R:
        """Run one invocation (one round trip)."""
        return self.pipelined([invocation])[0]

    def pipelined(
        self, invocations: Sequence[Invocation[R]], then: Callable[[Any], None] | None = None
    ) -> list[R]:
        """Run invocations in one round trip, then the commands ``then`` adds; their outcomes.

        An invocation that found its script missing is run again after loading it; the
        others, which ran, are not, nor are the ``then`` commands (they ran already).
        """
        return self.pipelined_after(invocations, (), then)[0]

    def pipelined_after(
        self,
        invocations: Sequence[Invocation[R]],
        after: Sequence[tuple[Any, ...]],
        then: Callable[[Any], None] | None = None,
    ) -> tuple[list[R], list[Any]]:
        """``pipelined``, with the ``after`` commands last in the same round trip; their replies.

        ``after`` (``ReplicaAcks``: ``SET`` mark, ``WAIT``) is sent again behind invocations
        that are run again after a ``NOSCRIPT``, so it still follows every write.
        """
        pipe = self.redis.pipeline(transaction=False)
        for invocation in invocations:
            pipe.execute_command(*invocation.command)  # type: ignore[no-untyped-call]
        if then is not None:
            then(pipe)
        for command in after:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        replies: list[Any] = pipe.execute(raise_on_error=False)
        tail = len(replies) - len(after)
        missing = [i for i, r in enumerate(replies[: len(invocations)]) if _no_script(r)]
        if missing:
            for source in {invocations[i].script.source for i in missing}:
                self.redis.script_load(source)
            pipe = self.redis.pipeline(transaction=False)
            for i in missing:
                pipe.execute_command(*invocations[i].command)  # type: ignore[no-untyped-call]
            for command in after:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            again: list[Any] = pipe.execute(raise_on_error=False)
            for i, reply in zip(missing, again, strict=False):
                replies[i] = reply
            replies[tail:] = again[len(missing) :]
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        outcomes = [
            inv.script.parse(reply) for inv, reply in zip(invocations, replies, strict=False)
        ]
        return outcomes, replies[tail:]

    def direct(self, invocation: Invocation[R]) -> R:
        """Run one invocation on this thread's own connection (the worker's hot path)."""
        return invocation.script.parse(self.direct_scripts(invocation))

    def direct_after(
        self, invocation: Invocation[R], after: Sequence[tuple[Any, ...]]
    ) -> tuple[R, list[Any]]:
        """``direct``, with ``after`` on the same connection in the same write; their replies."""
        replies, rest = self.direct_many([invocation], after)
        return replies[0], rest

    def direct_many(
        self, invocations: Sequence[Invocation[Any]], after: Sequence[tuple[Any, ...]]
    ) -> tuple[list[Any], list[Any]]:
        """``direct_after`` for several invocations (of any scripts) in one write."""
        return _parsed(invocations, self.direct_scripts.then(invocations, after))

    def pooled_after(
        self, invocations: Sequence[Invocation[R]], after: Sequence[tuple[Any, ...]]
    ) -> tuple[list[R], list[Any]]:
        """``pipelined_after`` sent as ``DirectScripts`` sends, on a connection of the pool.

        The same round trip for a fraction of a pipeline's CPU (a client's dispatches).
        """
        return _parsed(invocations, self.direct_scripts.pooled(invocations, after))

    def close(self) -> None:
        """Close this thread's own connection."""
        self.direct_scripts.close()


def outcome(kind: Any, raw: Any, script: Script[Any]) -> Any:
    """``raw`` as one of the ``Literal`` ``kind``'s values; a script replying otherwise is a bug."""
    return _checked(as_text(raw), get_args(kind), script)


def outcome_word(raw: Any, script: Script[Any]) -> Any:
    """``raw`` as one of ``script.outcomes``; a script replying otherwise is a bug."""
    return _checked(as_text(raw), script.outcomes, script)


def _checked(value: str, allowed: tuple[str, ...], script: Script[Any]) -> str:
    if value not in allowed:
        raise ValueError(f"{script.name}.lua replied {value!r}, not one of {allowed}")
    return value


def emit_keys(keys: Keys) -> dict[str, str]:
    """The KEYS every emitting script takes after its own (``lib/emit.lua``), by name."""
    return {
        "hook_types": keys.webhook_events,
        "outbox": keys.webhook_outbox,
        "archive": keys.history_archive,
    }


def push_keys(keys: Keys, queue: str) -> dict[str, str]:
    """The KEYS a pushing script takes for its message (``lib/push.lua``), by name."""
    return {"queue": queue, "pushes": keys.queue_pushes(queue)}


def flag(value: bool) -> str:
    """A boolean as scripts read it: ``'1'`` or ``'0'``."""
    return "1" if value else "0"


def pairs(fields: Mapping[str, str] | None) -> list[str]:
    """Record field/value pairs, flat, for a variadic ARGV tail."""
    return [item for pair in (fields or {}).items() for item in pair]


def _no_script(reply: Any) -> bool:
    return isinstance(reply, NoScriptError)


def _parsed(
    invocations: Sequence[Invocation[Any]], replies: list[Any]
) -> tuple[list[Any], list[Any]]:
    """The invocations' replies parsed by their scripts, and the replies after them."""
    tail = len(invocations)
    parsed = [inv.script.parse(r) for inv, r in zip(invocations, replies[:tail], strict=True)]
    return parsed, replies[tail:]
