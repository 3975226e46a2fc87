"""``Tool``: one callable capability with its schema, risk and policies.

Subclass it (class-based tools, with an ``Input`` model, a raw ``parameters`` JSON schema,
or a typed ``execute`` signature) or let ``@registry.tool`` wrap a function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, TypedDict, Unpack

from pydantic import BaseModel

from toolq.errors import (
    ApprovalPredicateError,
    ConfigurationError,
    CostError,
    InvalidArgumentsError,
)
from toolq.execution.context import ToolContext
from toolq.execution.middleware import Middleware
from toolq.models import RiskLevel
from toolq.quotas import RateLimit, finite_cost
from toolq.registry.schema import (
    ArgumentSchema,
    DictSchema,
    ModelSchema,
    OutputSchema,
    context_parameter,
    parse_docstring,
    signature_model,
)
from toolq.registry.secrets import SecretPaths, mask_arguments

ApprovalPredicate = Callable[[dict[str, Any]], bool]


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace(".", "_").split("_")) or "Tool"


class Tool:
    """Base class of every tool.

    Class attributes configure it; ``execute`` does the work and may be a plain function,
    a coroutine, or an async generator whose yields are progress and whose last yield (or a
    yielded ``ToolOutput``) is the result. Arguments arrive as keyword arguments; a
    parameter annotated ``ToolContext`` receives the call's context.
    """

    name: str = ""
    description: str = ""
    risk: RiskLevel = RiskLevel.SAFE
    tags: tuple[str, ...] = ()
    category: str | None = None
    requires_approval: bool | ApprovalPredicate | None = None
    allowed_behaviors: tuple[str, ...] | None = None
    timeout: float | None = None
    retries: int = 0
    retry_on: tuple[type[BaseException], ...] = ()
    idempotent: bool = False
    approval_timeout: float | None = None
    concurrency: int | None = None
    """Most executions of this tool at once across the whole fleet (``None``: no cap)."""
    rate_limit: RateLimit | str | None = None
    """Most starts of this tool per period across the fleet (``"10/s"``; ``None``: no limit)."""
    cost: float | Callable[..., float] = 0
    """Charged to the tenant's budget when a call is accepted: a number, or a function of
    the call's arguments (keyword arguments, as the handler gets them) returning one."""
    Input: ClassVar[type[BaseModel] | None] = None
    parameters: ClassVar[dict[str, Any] | None] = None
    output_schema: dict[str, Any] | type[BaseModel] | None = None
    middleware: Sequence[Middleware] = ()

    def __init__(self) -> None:
        risk_level = getattr(self, "risk_level", None)  # roura spells it risk_level
        self.risk = RiskLevel.parse(risk_level if risk_level is not None else self.risk)
        if not self.name:
            raise ConfigurationError(f"{type(self).__name__} has no name")
        if not self.description:
            self.description = self._default_description()
        self.tags = tuple(self.tags)
        self.retry_on = tuple(self.retry_on)
        self.middleware = tuple(self.middleware)
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigurationError(f"tool {self.name!r}: concurrency must be at least 1")
        if self.rate_limit is not None:
            try:
                self.rate_limit = RateLimit.parse(self.rate_limit)
            except ValueError as exc:
                raise ConfigurationError(f"tool {self.name!r}: {exc}") from None
        if not callable(self.cost) and not finite_cost(self.cost):
            raise ConfigurationError(
                f"tool {self.name!r}: cost must be a finite number >= 0 or a function"
            )
        if self.allowed_behaviors is not None:
            self.allowed_behaviors = tuple(self.allowed_behaviors)
        self.schema: ArgumentSchema = self._build_schema()
        self._output = (
            OutputSchema(self.name, self.output_schema) if self.output_schema is not None else None
        )
        self._context_params = {
            method: context_parameter(getattr(self, method))
            for method in ("execute", "preview", "undo", "validate_args", "instructions")
        }

    def _default_description(self) -> str:
        return parse_docstring(type(self).__doc__)[0]

    def _build_schema(self) -> ArgumentSchema:
        if self.Input is not None:
            return ModelSchema(self.name, self.Input)
        if self.parameters is not None:
            return DictSchema(self.name, self.parameters)
        descriptions = parse_docstring(self.execute.__doc__)[1]
        model = signature_model(self.execute, f"{_camel(self.name)}Input", descriptions)
        return ModelSchema(self.name, model)

    # -- overridable behaviour ---------------------------------------------------------------

    # ``*args`` keeps any typed override compatible under mypy; calls pass keywords only
    def execute(self, *args: Any, **arguments: Any) -> Any:
        """Do the work; override in subclasses."""
        raise NotImplementedError(f"tool {self.name!r} does not implement execute()")

    def preview(self, *args: Any, **arguments: Any) -> dict[str, Any] | None:
        """Describe what the call would do, shown to approvers; ``None`` when not defined."""
        return None

    def validate_args(self, *args: Any, **arguments: Any) -> tuple[bool, str] | None:
        """Extra checks after the schema; return ``(False, reason)`` to refuse."""
        return None

    def is_available(self) -> bool:
        """Return False to hide the tool from schemas and refuse its calls."""
        return True

    def check_runtime(self) -> None:
        """Raise ``ConfigurationError`` if this process cannot run the tool; workers call it."""

    def instructions(self, ctx: ToolContext | None = None) -> str | None:
        """Text for the system prompt about when and how to use this tool."""
        return None

    def approval_metadata(self) -> dict[str, Any] | None:
        """Context shown to approvers (pai-agent-sdk's ``get_approval_metadata``)."""
        return None

    def undo(self, undo_data: dict[str, Any]) -> Any:
        """Reverse a call from the undo data its handler returned; override to support undo."""
        raise NotImplementedError(f"tool {self.name!r} cannot be undone")

    # -- derived ---------------------------------------------------------------------------

    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments."""
        return self.schema.json_schema

    @property
    def output_json_schema(self) -> dict[str, Any] | None:
        """JSON schema of the output, if declared."""
        return self._output.json_schema if self._output else None

    @property
    def secret_fields(self) -> frozenset[str]:
        """Top-level argument names whose values are never shown (``SecretStr`` or marked)."""
        return self.schema.secret_fields

    @property
    def secret_paths(self) -> SecretPaths:
        """Where secret values sit in this tool's arguments, at any depth."""
        return self.schema.secret_paths

    @property
    def has_preview(self) -> bool:
        """True when the tool defines ``preview``."""
        return _overrides(self, "preview")

    @property
    def has_undo(self) -> bool:
        """True when the tool defines ``undo``."""
        return _overrides(self, "undo")

    def needs_approval(self, arguments: dict[str, Any]) -> bool | None:
        """Return the tool's own answer (``None``: leave it to the policy's default by risk).

        Raises ``ApprovalPredicateError`` when the predicate raises or its answer is not
        bool-able.
        """
        if callable(self.requires_approval):
            try:
                return bool(self.requires_approval(self.schema.given(arguments)))
            except Exception as exc:
                # A predicate on unvalidated arguments meets strings where it expects numbers;
                # that call fails with a readable error, not the whole batch with a 500.
                raise ApprovalPredicateError(
                    f"the approval predicate of {self.name!r} failed on these arguments: "
                    f"{type(exc).__name__}: {str(exc)[:200]}",
                    tool=self.name,
                ) from exc
        return self.requires_approval

    def is_behavior_allowed(self, behavior: str | None) -> bool:
        """Stageflow's gating: ``allowed_behaviors`` ``None`` allows every behavior."""
        if self.allowed_behaviors is None:
            return True
        return behavior in self.allowed_behaviors

    def cost_of(self, arguments: dict[str, Any]) -> float:
        """What a call with ``arguments`` costs; ``CostError`` when its ``cost`` cannot say.

        A cost function gets the arguments as keyword arguments (as the handler would) and
        must return a finite number >= 0.
        """
        cost = self.cost
        if not callable(cost):
            return float(cost)
        try:
            value = cost(**arguments)
        except Exception as exc:
            raise CostError(
                f"the cost of this call of {self.name!r} could not be computed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if not finite_cost(value):
            shown = (
                f"an int of {value.bit_length()} bits" if isinstance(value, int) else repr(value)
            )
            raise CostError(
                f"the cost function of {self.name!r} returned {shown}, not a number >= 0"
            )
        return float(value)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Schema-validated keyword arguments, then the tool's ``validate_args``."""
        validated = self.schema.validate(arguments)
        verdict = self.call_method("validate_args", validated, None)
        if verdict is not None:
            ok, reason = verdict
            if not ok:
                raise InvalidArgumentsError(
                    f"invalid arguments for {self.name!r}: {reason}",
                    tool=self.name,
                    errors=[reason],
                )
        return validated

    def run_timeout(self, default: float | None) -> float | None:
        """Seconds a call of this tool may run: its own ``timeout``, else ``default``."""
        return self.timeout if self.timeout is not None else default

    def validate_output(self, output: Any) -> Any:
        """Return the output, checked against the output schema when one is declared."""
        return self._output.validate(output) if self._output else output

    def redact(self, arguments: dict[str, Any], *, conservative: bool = False) -> dict[str, Any]:
        """Return a copy of the arguments with every secret value masked, at any depth.

        ``conservative`` (arguments that did not validate) also masks a value whose shape
        does not match a schema that leads to a secret.
        """
        return dict(mask_arguments(arguments, self.secret_paths, conservative=conservative))

    def call_method(self, method: str, arguments: dict[str, Any], ctx: ToolContext | None) -> Any:
        """Call ``execute``/``preview``/``undo``/... with arguments and, if wanted, the context."""
        func = getattr(self, method)
        kwargs = dict(arguments)
        context_name = self._context_params.get(method)
        if context_name is not None:
            kwargs[context_name] = ctx if ctx is not None else ToolContext(tool_name=self.name)
        return func(**kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} risk={self.risk.value}>"


class FunctionToolOptions(TypedDict, total=False):
    """The options of a function tool: ``@registry.tool(...)`` and ``FunctionTool(func, ...)``.

    Each sets the ``Tool`` attribute or method of the same name; one not given (or ``None``)
    keeps the ``Tool`` default, shown here after the type.
    """

    description: str | None
    """What the model reads about the tool; default: the docstring's summary."""
    risk: RiskLevel | str
    """``safe``; approval by default follows the risk."""
    tags: Iterable[str]
    """None; ``registry.search(tags=...)`` finds tools by them."""
    category: str | None
    """None; a category can be switched off with all its tools."""
    requires_approval: bool | ApprovalPredicate | None
    """None: the policy decides by risk; a predicate gets the call's arguments."""
    allowed_behaviors: Iterable[str] | None
    """None: every behavior of the caller is allowed."""
    timeout: float | None
    """None: the default timeout; seconds a call may run."""
    retries: int
    """0; how many more attempts a call gets after raising one of ``retry_on``."""
    retry_on: Iterable[type[BaseException]]
    """None: no exception is retried."""
    idempotent: bool
    """False; True lets a call run again after its worker was lost mid-call."""
    approval_timeout: float | None
    """None: the default; seconds a call may wait for a decision."""
    concurrency: int | None
    """None: no cap on the executions of this tool at once across the fleet."""
    rate_limit: RateLimit | str | None
    """None: no limit on the starts per period across the fleet (``"10/s"``)."""
    cost: float | Callable[..., float]
    """0; charged to the tenant's budget, or a function of the call's arguments."""
    output_schema: dict[str, Any] | type[BaseModel] | None
    """None: the output is not checked."""
    middleware: Sequence[Middleware]
    """None: only the registry's middleware."""
    preview: Callable[..., Any] | None
    """None; what the call would do, shown to approvers."""
    undo: Callable[..., Any] | None
    """None: the tool cannot be undone; else reverses a call from its undo data."""
    validate_args: Callable[..., Any] | None
    """None; checks after the schema, returning ``(False, reason)`` to refuse."""
    is_available: Callable[[], bool] | None
    """None: always available; False hides the tool and refuses its calls."""
    instructions: str | Callable[..., str | None] | None
    """None; text for the system prompt, or a function of the context returning it."""
    approval_metadata: dict[str, Any] | Callable[[], dict[str, Any] | None] | None
    """None; context shown to approvers, or a function returning it."""


def _overrides(tool: Tool, method: str) -> bool:
    own = getattr(type(tool), method, None)
    if own is not getattr(Tool, method):
        return True
    return method in tool.__dict__  # FunctionTool sets hooks per instance


class FunctionTool(Tool):
    """A tool made from a function by ``@registry.tool``; calling it calls the function."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        **options: Unpack[FunctionToolOptions],
    ) -> None:
        given: dict[str, Any] = dict(options)
        unknown = given.keys() - FunctionToolOptions.__optional_keys__
        if unknown:
            raise TypeError(f"unexpected tool options: {', '.join(sorted(unknown))}")
        summary, self._param_docs = parse_docstring(func.__doc__)
        self.func = func
        self.name = name or func.__name__
        self.description = given.pop("description", None) or summary
        instructions = given.pop("instructions", None)
        metadata = given.pop("approval_metadata", None)
        # the rest are the ``Tool`` attributes (and hook methods) of the same name;
        # ``Tool.__init__`` parses the risk and rate limit and makes tuples of the iterables
        for option, value in given.items():
            if value is not None:
                setattr(self, option, value)
        if instructions is not None:
            text = instructions
            self.instructions = (  # type: ignore[method-assign]
                text if callable(text) else (lambda ctx=None: text)
            )
        if metadata is not None:
            self.approval_metadata = (  # type: ignore[method-assign]
                metadata if callable(metadata) else (lambda: metadata)
            )
        self.execute = func  # type: ignore[method-assign]
        super().__init__()

    def _default_description(self) -> str:
        return ""

    def _build_schema(self) -> ArgumentSchema:
        model = signature_model(self.func, f"{_camel(self.name)}Input", self._param_docs)
        return ModelSchema(self.name, model)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, as if it were not decorated."""
        return self.func(*args, **kwargs)
