"""``ToolChain``: tools run one after another, each step's output feeding the next.

codomyrmex's tool chain, on the queue: every step is a real dispatched call (its risk
queue, gating and approvals apply), so a chain can stop at a DANGEROUS step until a human
approves it, and carries on once the call is decided. The steps of one execution share a
run id, so the whole chain is one event stream (``client.events(run_id)``) and its parked
steps show up in ``client.approvals.pending(run_id=...)``.

Paths in ``input_mapping`` are dot-separated, to any depth, through dicts (by key) and
lists (by integer index, negative counting from the end): ``"user.addresses.0.city"``.
A leading ``context`` segment is optional and names the root, so
``"context.user.addresses.0.city"`` is the same path and ``"context"`` alone is the whole
context (a key really named ``context`` is reached as ``"context.context"``).
"""

from __future__ import annotations

import copy
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from pydantic.dataclasses import dataclass

from toolq.errors import (
    ReplicationError,
    ToolDeniedError,
    ToolqError,
    ToolTimeoutError,
    WaitTimeoutError,
)
from toolq.models import CallResult, CallStatus

if TYPE_CHECKING:
    from toolq.dispatch.client import Client
    from toolq.registry.tool import Tool

ROOT = "context"
"""Optional first segment of a context path: the accumulated context itself."""

_SEGMENT = re.compile(r"[^.\s]+")
_INDEX = re.compile(r"-?\d+")


class ContextPathError(ToolqError, LookupError):
    """A context path that is malformed, or that leads nowhere in the context."""

    code = "context_path"


def parse_path(path: str) -> tuple[str, ...]:
    """Split a context path into its segments, without the optional ``context`` root.

    Raises ``ContextPathError`` for an empty path, an empty segment (``"a..b"``, a
    trailing dot) or whitespace inside a segment.
    """
    if not isinstance(path, str) or not path:
        raise ContextPathError("empty context path", path=path)
    parts = path.split(".")
    for part in parts:
        if not _SEGMENT.fullmatch(part):
            problem = "an empty segment" if not part else f"a bad segment {part!r}"
            raise ContextPathError(f"context path {path!r} has {problem}", path=path)
    return tuple(parts[1:] if parts[0] == ROOT else parts)


def resolve_path(context: Mapping[str, Any], path: str) -> Any:
    """Follow ``path`` through ``context``; a ``ContextPathError`` says where it stops."""
    value: Any = context
    parts = parse_path(path)
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or ROOT
        if isinstance(value, Mapping):
            if part not in value:
                keys = ", ".join(repr(k) for k in sorted(map(str, value))[:10]) or "none"
                raise ContextPathError(
                    f"context path {path!r}: {where} has no key {part!r} (keys: {keys})",
                    path=path,
                )
            value = value[part]
        elif isinstance(value, list | tuple):
            if not _INDEX.fullmatch(part):
                raise ContextPathError(
                    f"context path {path!r}: {where} is a list, and {part!r} is not an index",
                    path=path,
                )
            index = int(part)
            if not -len(value) <= index < len(value):
                raise ContextPathError(
                    f"context path {path!r}: {where} has no index {index} (length {len(value)})",
                    path=path,
                )
            value = value[index]
        else:
            raise ContextPathError(
                f"context path {path!r}: {where} is {type(value).__name__}, "
                f"not an object or a list, so it has no {part!r}",
                path=path,
            )
    return value


@dataclass(frozen=True)
class ChainStep:
    """One step: the tool to call, where its arguments come from, where its output goes.

    ``input_mapping`` maps an argument of the tool to a context path. Empty, the tool gets
    the context entries named like its parameters. ``output_key`` stores the step's output
    under that key; empty, a dict output is merged into the context (other outputs stay
    in ``ChainResult.step_results`` only).
    """

    tool_name: str
    input_mapping: dict[str, str] = field(default_factory=dict)
    output_key: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A plain-dict copy."""
        return {
            "tool_name": self.tool_name,
            "input_mapping": dict(self.input_mapping),
            "output_key": self.output_key,
        }


class ValidationResult(BaseModel):
    """Whether a chain can run, and every reason it cannot."""

    valid: bool = True
    errors: list[str] = Field(default_factory=list)

    def merge(self, other: ValidationResult) -> ValidationResult:
        """Both results combined: valid only if both are."""
        return ValidationResult(
            valid=self.valid and other.valid, errors=[*self.errors, *other.errors]
        )

    def to_dict(self) -> dict[str, Any]:
        """A plain-dict copy."""
        return self.model_dump(mode="json")


class ChainResult(BaseModel):
    """The outcome of one execution of a chain.

    ``step_results`` holds one ``CallResult`` per step that was attempted, in order; a step
    that never reached the queue (a context path that leads nowhere) has a failed result
    with an empty ``call_id``. Steps after a failure are skipped when ``stop_on_failure``.
    """

    success: bool = True
    run_id: str = ""
    context: dict[str, Any] = Field(default_factory=dict)
    step_results: list[CallResult] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    duration_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return self.model_dump(mode="json")


class ToolChain:
    """Steps run in order through a ``Client``: each one dispatched, waited for, then mapped."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._steps: list[ChainStep] = []

    def add_step(self, step: ChainStep) -> ToolChain:
        """Append a step; returns the chain, for chaining calls."""
        self._steps.append(step)
        return self

    @property
    def steps(self) -> list[ChainStep]:
        """A copy of the steps."""
        return list(self._steps)

    def clear(self) -> None:
        """Remove every step."""
        self._steps.clear()

    def __len__(self) -> int:
        return len(self._steps)

    def __repr__(self) -> str:
        return f"ToolChain(steps={[s.tool_name for s in self._steps]!r})"

    # -- validation --------------------------------------------------------------------------

    def validate(self) -> ValidationResult:
        """Check every step against the client's registry without running anything.

        Reports unknown or disabled tools, malformed paths, arguments the tool does not
        take, required arguments a non-empty mapping leaves out, and output keys later
        steps could not address.
        """
        errors: list[str] = [] if self._steps else ["the chain has no steps"]
        for index, step in enumerate(self._steps):
            errors.extend(
                f"step {index} ({step.tool_name!r}): {problem}" for problem in self._problems(step)
            )
        return ValidationResult(valid=not errors, errors=errors)

    def _problems(self, step: ChainStep) -> list[str]:
        problems: list[str] = []
        tool = self.client.registry.get(step.tool_name) if step.tool_name else None
        if not step.tool_name:
            problems.append("tool_name is empty")
        elif tool is None:
            problems.append("no such tool in the registry")
        else:
            try:
                self.client.registry.check_enabled(tool)
            except ToolDeniedError as exc:
                problems.append(exc.message)
        for argument, path in step.input_mapping.items():
            if not argument:
                problems.append(f"an empty argument name is mapped to {path!r}")
            try:
                parse_path(path)
            except ContextPathError as exc:
                problems.append(f"argument {argument!r}: {exc.message}")
        if tool is not None and step.input_mapping:
            problems.extend(_argument_problems(tool, step.input_mapping))
        if "." in step.output_key or step.output_key == ROOT:
            problems.append(f"output_key {step.output_key!r} could not be addressed by a path")
        return problems

    # -- execution ---------------------------------------------------------------------------

    def execute(
        self,
        initial_input: Mapping[str, Any] | None = None,
        *,
        stop_on_failure: bool = True,
        validate_tools: bool = True,
        run_id: str | None = None,
        timeout: float | None = None,
        principal: str | None = None,
        behavior: str | None = None,
        chain_id: str | None = None,
    ) -> ChainResult:
        """Run the steps in order on the workers; blocks until the chain is done.

        ``timeout`` bounds the whole chain: a step still unfinished when it runs out is
        cancelled (at once if queued or awaiting approval, cooperatively if running) and
        fails. A step waiting for approval blocks until it is decided; denied or expired
        is a failed step. ``principal`` and ``behavior`` go with every dispatch.
        ``chain_id`` names the steps' call ids (``chain_<id>_<n>``): executing again with
        the same ``run_id`` and ``chain_id`` after a crash reuses the calls already made
        instead of running them twice.
        """
        started = time.perf_counter()
        deadline = None if timeout is None else time.monotonic() + timeout
        run = run_id or f"chain-{uuid.uuid4().hex}"
        chain = chain_id or uuid.uuid4().hex
        context: dict[str, Any] = copy.deepcopy(dict(initial_input or {}))
        steps = list(self._steps)

        def finish(results: list[CallResult], errors: list[str]) -> ChainResult:
            return ChainResult(
                success=not errors,
                run_id=run,
                context=context,
                step_results=results,
                errors=errors,
                duration_ms=(time.perf_counter() - started) * 1000,
            )

        if validate_tools:
            check = self.validate()
            if not check.valid:
                return finish([], check.errors)
        results: list[CallResult] = []
        errors: list[str] = []
        for index, step in enumerate(steps):
            result = self._run_step(
                step,
                context,
                run_id=run,
                tool_call_id=f"chain_{chain}_{index}",
                deadline=deadline,
                timeout=timeout,
                principal=principal,
                behavior=behavior,
            )
            results.append(result)
            if result.ok:
                _store_output(step, result, context)
                continue
            errors.append(
                f"step {index} ({step.tool_name!r}) {result.status.value}: {result.error}"
            )
            if stop_on_failure:
                break
        return finish(results, errors)

    def _run_step(
        self,
        step: ChainStep,
        context: dict[str, Any],
        *,
        run_id: str,
        tool_call_id: str,
        deadline: float | None,
        timeout: float | None,
        principal: str | None,
        behavior: str | None,
    ) -> CallResult:
        try:
            arguments = self._arguments(step, context)
            batch = self.client.dispatch(
                [{"id": tool_call_id, "name": step.tool_name, "arguments": arguments}],
                run_id=run_id,
                principal=principal,
                behavior=behavior,
            )
        except ToolqError as exc:  # nothing was queued: a bad path or an unreadable payload
            return CallResult(
                call_id="",
                tool_call_id=tool_call_id,
                name=step.tool_name,
                status=CallStatus.FAILED,
                error=exc.message,
                error_type=exc.code,
                run_id=run_id,
            )
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return batch.wait(remaining)[0]
        except WaitTimeoutError:
            call_id = batch.call_ids[0]
            try:
                waiting = self.client.result(call_id).status
                stopped = self.client.cancel(call_id, principal=principal)
            except ReplicationError:  # it ended, but the replicas have not confirmed how
                note = (
                    f"no confirmed result within the chain's {timeout:g}s timeout: the call "
                    "ended, but the replicas had not confirmed its outcome"
                )
                return CallResult(
                    call_id=call_id,
                    tool_call_id=tool_call_id,
                    name=step.tool_name,
                    status=CallStatus.UNKNOWN,
                    error=note,
                    error_type=ToolTimeoutError.code,
                    run_id=run_id,
                )
            if stopped.ok:  # it finished while we gave up on it
                return stopped
            note = f"no result within the chain's {timeout:g}s timeout (the call was {waiting})"
            if stopped.status is CallStatus.CANCELLED:
                note += " and has been cancelled"
            else:
                note += "; cancel requested"
            return stopped.model_copy(update={"error": note, "error_type": ToolTimeoutError.code})

    def _arguments(self, step: ChainStep, context: dict[str, Any]) -> dict[str, Any]:
        if step.input_mapping:
            return {arg: resolve_path(context, path) for arg, path in step.input_mapping.items()}
        schema = self.client.registry.require(step.tool_name).input_schema
        properties = schema.get("properties")
        if properties is None and schema.get("additionalProperties", True) is not False:
            return dict(context)  # an open schema that names nothing: hand it everything
        return {k: v for k, v in context.items() if k in (properties or {})}


def _argument_problems(tool: Tool, mapping: Mapping[str, str]) -> list[str]:
    schema = tool.input_schema
    properties: dict[str, Any] = schema.get("properties") or {}
    problems: list[str] = []
    if schema.get("additionalProperties", True) is False:
        known = ", ".join(properties) or "none"
        problems.extend(
            f"maps argument {arg!r}, which the tool does not take (it takes: {known})"
            for arg in mapping
            if arg and arg not in properties
        )
    problems.extend(
        f"required argument {name!r} is not mapped"
        for name in schema.get("required", ())
        if name not in mapping
    )
    return problems


def _store_output(step: ChainStep, result: CallResult, context: dict[str, Any]) -> None:
    value = result.output
    if value is None and result.content:  # content-block tools: keep the blocks as dicts
        value = [block.model_dump(mode="json") for block in result.content]
    if step.output_key:
        context[step.output_key] = value
    elif isinstance(value, dict):
        context.update(value)
