"""``Script`` and ``Scripts``: the Lua files of ``toolq/results/lua``, run one way.

A script's SHA1 is computed here from its source, so nothing is registered ahead: every
script runs with ``EVALSHA``, and a ``NOSCRIPT`` reply (Redis restarted, or its scripts were
flushed) loads the script and runs that invocation again. A script Redis lacked ran nowhere,
so the retry cannot apply it twice. The pooled client always sends a pipeline (of one, or
many invocations: one round trip either way); the worker's hot path sends the same
``EVALSHA`` on a connection of its thread's own (``DirectScripts``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
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


@cache
def lua_source(name: str) -> str:
    """The text of ``toolq/results/lua/<name>`` (package data)."""
    return (resources.files("toolq.results") / "lua" / name).read_text(encoding="utf-8")


class Script(Generic[R]):
    """One ``.lua`` file (after the ``lib/`` files it includes) and how to read its reply.

    Subclasses name the file, the libraries and a ``parse``; their ``__call__`` takes
    keyword arguments and returns an ``Invocation`` for ``Scripts`` to run.
    """

    file: ClassVar[str]
    includes: ClassVar[tuple[str, ...]] = ()
    outcomes: ClassVar[tuple[str, ...]] = ()
    """The outcome words the script returns (its ``Literal``'s values), if it returns words."""

    def __init__(self) -> None:
        parts = [lua_source(f"lib/{name}.lua") for name in self.includes]
        self.source = "\n".join([*parts, lua_source(self.file)])
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    @property
    def name(self) -> str:
        """The script's name (its file without ``.lua``)."""
        return self.file.removesuffix(".lua")

    def parse(self, reply: Any) -> R:
        """The typed outcome of a raw reply."""
        raise NotImplementedError

    def invoke(self, keys: Sequence[str], args: Sequence[Any]) -> Invocation[R]:
        """KEYS and ARGV in the order of the file's header."""
        return Invocation(self, tuple(keys), tuple(args))


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
        reply, *rest = self.direct_scripts.then(invocation, after)
        return invocation.script.parse(reply), rest

    def close(self) -> None:
        """Close this thread's own connection."""
        self.direct_scripts.close()


def outcome(kind: Any, raw: Any, script: Script[Any]) -> Any:
    """``raw`` as one of the ``Literal`` ``kind``'s values; a script replying otherwise is a bug."""
    value = as_text(raw)
    if value not in get_args(kind):
        raise ValueError(f"{script.name}.lua replied {value!r}, not one of {get_args(kind)}")
    return value


def emit_keys(keys: Keys) -> list[str]:
    """The KEYS every emitting script takes after its own (``lib/emit.lua``)."""
    return [keys.webhook_events, keys.webhook_outbox]


def _no_script(reply: Any) -> bool:
    return isinstance(reply, NoScriptError)
