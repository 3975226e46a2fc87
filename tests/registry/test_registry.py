"""ToolRegistry: registration styles, lookup, search, categories, availability, local invoke."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from toolq import (
    CallStatus,
    FunctionTool,
    FunctionToolOptions,
    RiskLevel,
    Tool,
    ToolContext,
    ToolRegistry,
)
from toolq.errors import (
    CategoryNotFoundError,
    ConfigurationError,
    DuplicateToolError,
    ToolNotFoundError,
)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


def names(tools: list[Tool]) -> list[str]:
    return [t.name for t in tools]


def schema_names(registry: ToolRegistry) -> list[str]:
    return [s["function"]["name"] for s in registry.schemas("openai")]


class Echo(Tool):
    """Echo the text back."""

    name = "echo"
    risk = "moderate"  # type: ignore[assignment]
    tags = ("text",)

    class Input(BaseModel):
        text: str

    def execute(self, text: str) -> str:
        return text


# -- the decorator ------------------------------------------------------------------------------


def test_decorator_options_land_on_the_tool(registry: ToolRegistry) -> None:
    def needs(args: dict[str, Any]) -> bool:
        return bool(args.get("force"))

    @registry.tool(
        "files.delete",
        description="Delete a file",
        risk="DANGEROUS",
        tags=["fs", "write"],
        category="files",
        requires_approval=needs,
        allowed_behaviors=["edit"],
        timeout=2.5,
        retries=3,
        retry_on=(OSError,),
        idempotent=True,
    )
    def delete(path: str, force: bool = False) -> str:
        return f"deleted {path}"

    assert isinstance(delete, FunctionTool)
    assert registry.get("files.delete") is delete
    assert delete.name == "files.delete"
    assert delete.description == "Delete a file"
    assert delete.risk is RiskLevel.DANGEROUS
    assert delete.tags == ("fs", "write")
    assert delete.category == "files"
    assert delete.allowed_behaviors == ("edit",)
    assert (delete.timeout, delete.retries, delete.retry_on, delete.idempotent) == (
        2.5,
        3,
        (OSError,),
        True,
    )
    assert delete.needs_approval({"path": "a", "force": True}) is True
    assert delete.needs_approval({"path": "a"}) is False
    assert "files" in registry.categories()
    # the decorated name still calls the function
    assert delete("a.txt") == "deleted a.txt"
    assert delete(path="b.txt", force=True) == "deleted b.txt"


def test_decorator_defaults(registry: ToolRegistry) -> None:
    @registry.tool()
    def noop() -> None:
        """Do nothing."""

    assert noop.name == "noop"
    assert noop.description == "Do nothing."
    assert noop.risk is RiskLevel.SAFE
    assert (noop.tags, noop.category, noop.requires_approval) == ((), None, None)
    assert (noop.allowed_behaviors, noop.timeout, noop.retries, noop.idempotent) == (
        None,
        None,
        0,
        False,
    )
    assert noop.needs_approval({}) is None


def test_every_function_tool_option_is_a_tool_attribute() -> None:
    # the options are set as the ``Tool`` attributes of their names: one not there is a typo
    missing = [name for name in FunctionToolOptions.__annotations__ if not hasattr(Tool, name)]
    assert missing == []


def test_an_unknown_option_is_refused(registry: ToolRegistry) -> None:
    def noop() -> None:
        """Do nothing."""

    with pytest.raises(TypeError, match="unexpected tool options: retry, risky"):
        registry.tool("noop", risky=True, retry=2)(noop)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unexpected tool options: timeout_s"):
        registry.register(noop, timeout_s=3)  # type: ignore[call-arg]
    assert len(registry) == 0


def test_bare_decorator(registry: ToolRegistry) -> None:
    @registry.tool
    def add(a: int, b: int = 1) -> int:
        return a + b

    assert isinstance(add, FunctionTool)
    assert registry["add"] is add
    assert add(2, 3) == 5
    assert registry.invoke("add", {"a": 2}).output == 3


def test_register_instance_class_and_function(registry: ToolRegistry) -> None:
    class Upper(Tool):
        name = "upper"
        description = "Upper-case"

        def execute(self, text: str) -> str:
            return text.upper()

    def lower(text: str) -> str:
        """Lower-case."""
        return text.lower()

    echo = registry.register(Echo())
    upper = registry.register(Upper)
    low = registry.register(lower, name="lower_case", risk="moderate", tags=("text",))

    assert isinstance(echo, Echo) and isinstance(upper, Upper)
    assert isinstance(low, FunctionTool)
    assert (low.name, low.description) == ("lower_case", "Lower-case.")
    assert low.risk is RiskLevel.MODERATE
    assert registry.names() == ["echo", "lower_case", "upper"]
    assert registry.invoke("upper", {"text": "a"}).output == "A"
    assert registry.invoke("lower_case", {"text": "B"}).output == "b"
    assert registry.invoke("echo", {"text": "c"}).output == "c"
    assert echo.description == "Echo the text back."  # from the class docstring


def test_register_refuses_what_is_not_a_tool(registry: ToolRegistry) -> None:
    with pytest.raises(ConfigurationError, match="not a Tool or a function"):
        registry.register(42)  # type: ignore[arg-type]

    class Nameless(Tool):
        pass

    with pytest.raises(ConfigurationError, match="Nameless has no name"):
        registry.register(Nameless)
    assert len(registry) == 0


@pytest.mark.parametrize("spelling", ["dangerous", "DANGEROUS", "Dangerous", RiskLevel.DANGEROUS])
def test_risk_accepts_strings_in_any_case(registry: ToolRegistry, spelling: Any) -> None:
    @registry.tool(risk=spelling)
    def rm() -> None:
        return None

    assert rm.risk is RiskLevel.DANGEROUS


def test_roura_risk_level_attribute(registry: ToolRegistry) -> None:
    class Shell(Tool):
        name = "shell"
        description = "Run a command"
        risk_level = RiskLevel.DANGEROUS

        def execute(self, command: str) -> str:
            return command

    class Fetch(Tool):
        name = "fetch"
        description = "Fetch"
        risk_level = "MODERATE"

        def execute(self, url: str) -> str:
            return url

    assert registry.register(Shell).risk is RiskLevel.DANGEROUS
    assert registry.register(Fetch).risk is RiskLevel.MODERATE
    assert names(registry.by_risk("dangerous")) == ["shell"]


def test_unknown_risk_is_refused(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="unknown risk level 'extreme'; expected one of safe"):

        @registry.tool(risk="extreme")
        def f() -> None:
            return None

    assert "f" not in registry


# -- lookup -------------------------------------------------------------------------------------


def test_duplicates_are_refused_and_the_first_stays(registry: ToolRegistry) -> None:
    first = registry.register(Echo)

    with pytest.raises(DuplicateToolError, match="'echo' is already registered") as err:

        @registry.tool(name="echo")
        def other(text: str) -> str:
            return "other"

    assert err.value.details == {"tool": "echo"}
    assert registry.get("echo") is first
    assert len(registry) == 1


def test_get_require_getitem_contains(registry: ToolRegistry) -> None:
    echo = registry.register(Echo)
    assert registry.get("echo") is echo
    assert registry.get("missing") is None
    assert registry.require("echo") is echo
    assert registry["echo"] is echo
    assert "echo" in registry and "missing" not in registry
    assert registry.has("echo") and not registry.has("missing")
    with pytest.raises(ToolNotFoundError, match=r"unknown tool 'missing' \(registered: echo\)"):
        registry.require("missing")
    with pytest.raises(ToolNotFoundError) as err:
        registry["missing"]
    assert isinstance(err.value, LookupError)


def test_unregister_and_remove(registry: ToolRegistry) -> None:
    registry.register(Echo)

    @registry.tool
    def other() -> None:
        return None

    assert registry.unregister("echo") is True
    assert registry.unregister("echo") is False
    assert registry.remove("other") is True
    assert registry.remove("other") is False
    assert len(registry) == 0
    assert registry.invoke("echo", {"text": "x"}).error_type == "tool_not_found"
    registry.register(Echo)  # the name is free again
    assert registry.names() == ["echo"]


def test_list_and_names_are_sorted(registry: ToolRegistry) -> None:
    for name in ["zeta", "alpha", "Mid", "beta"]:
        registry.register(lambda: None, name=name)
    assert registry.names() == ["Mid", "alpha", "beta", "zeta"]
    assert registry.list_names() == registry.names()
    assert names(registry.list()) == registry.names()
    assert [t.name for t in registry] == registry.names()


def test_search(registry: ToolRegistry) -> None:
    def make(name: str, *tags: str) -> None:
        registry.register(lambda: None, name=name, tags=tags)

    make("File_Read", "fs", "read")
    make("file_write", "fs", "write")
    make("http_get", "net", "read")
    make("shell", "exec")

    assert names(registry.search(name_contains="FILE")) == ["File_Read", "file_write"]
    assert names(registry.search(name_contains="_read")) == ["File_Read"]
    assert names(registry.search(tags=["read"])) == ["File_Read", "http_get"]
    assert names(registry.search(tags=["read", "exec"])) == ["File_Read", "http_get", "shell"]
    assert names(registry.search(tags=["fs", "read"], match_all_tags=True)) == ["File_Read"]
    assert names(registry.search(tags=["fs", "net"], match_all_tags=True)) == []
    assert names(registry.search(name_contains="file", tags=["write"])) == ["file_write"]
    assert names(registry.search(name_contains="nothing")) == []
    assert len(registry.search()) == 4


def test_by_risk(registry: ToolRegistry) -> None:
    for name, risk in [("b", "safe"), ("a", "safe"), ("m", "moderate"), ("d", "dangerous")]:
        registry.register(lambda: None, name=name, risk=risk)
    assert names(registry.by_risk(RiskLevel.SAFE)) == ["a", "b"]
    assert names(registry.get_by_risk("MODERATE")) == ["m"]
    assert names(registry.by_risk("dangerous")) == ["d"]


def test_include_another_registry(registry: ToolRegistry) -> None:
    other = ToolRegistry()
    other.register(Echo)
    registry.include(other)
    assert registry.get("echo") is other.get("echo")
    with pytest.raises(DuplicateToolError):
        registry.include([Echo()])


# -- categories ---------------------------------------------------------------------------------


def test_categories_hide_and_refuse_when_disabled(registry: ToolRegistry) -> None:
    registry.setup_category("data", "Data analysis tools")

    @registry.tool(category="data", instructions="Analyse rows.")
    def analyse(rows: int) -> int:
        return rows * 2

    @registry.tool
    def plain() -> str:
        return "plain"

    assert registry.categories()["data"].description == "Data analysis tools"
    assert schema_names(registry) == ["analyse", "plain"]
    assert registry.invoke("analyse", {"rows": 2}).output == 4

    registry.disable_category("data")
    assert registry.categories()["data"].enabled is False
    assert schema_names(registry) == ["plain"]
    assert [s["name"] for s in registry.schemas("anthropic")] == ["plain"]
    assert registry.instructions() == ""
    assert registry.is_enabled(analyse) is False
    refused = registry.invoke("analyse", {"rows": 2})
    assert refused.status is CallStatus.DENIED
    assert refused.error_type == "tool_denied"
    assert refused.error == "tool 'analyse' is disabled (category 'data' is disabled)"
    assert refused.attempts == 0

    registry.enable_category("data")
    assert schema_names(registry) == ["analyse", "plain"]
    assert registry.invoke("analyse", {"rows": 3}).output == 6


def test_set_categories_enabled(registry: ToolRegistry) -> None:
    registry.setup_category("a")
    registry.setup_category("b", enabled=False)
    registry.register(lambda: None, name="in_a", category="a")
    registry.register(lambda: None, name="in_b", category="b")
    registry.register(lambda: None, name="in_c", category="c")  # created on registration
    assert schema_names(registry) == ["in_a", "in_c"]

    registry.set_categories_enabled(["a", "c"], False)
    assert schema_names(registry) == []
    registry.set_categories_enabled(["a", "b", "c"], True)
    assert schema_names(registry) == ["in_a", "in_b", "in_c"]

    with pytest.raises(CategoryNotFoundError, match="unknown categories: nope"):
        registry.set_categories_enabled(["a", "nope"], False)
    assert registry.categories()["a"].enabled is True  # nothing changed
    with pytest.raises(CategoryNotFoundError):
        registry.disable_category("nope")


def test_delete_category_removes_its_tools(registry: ToolRegistry) -> None:
    registry.setup_category("old")
    registry.register(lambda: None, name="x", category="old")
    registry.register(lambda: None, name="y", category="old")
    registry.register(lambda: None, name="z")

    registry.delete_category("old")
    assert "old" not in registry.categories()
    assert registry.names() == ["z"]
    with pytest.raises(CategoryNotFoundError, match="unknown category 'old'"):
        registry.delete_category("old")


# -- availability and instructions --------------------------------------------------------------


def test_unavailable_tools_are_skipped_and_refused(registry: ToolRegistry) -> None:
    state = {"up": False}

    class Gpu(Tool):
        name = "gpu"
        description = "Needs a GPU"

        def is_available(self) -> bool:
            return state["up"]

        def instructions(self, ctx: ToolContext | None = None) -> str:
            return "Use the GPU."

        def execute(self) -> str:
            return "ran"

    @registry.tool(instructions="Always here.")
    def cpu() -> str:
        return "cpu"

    registry.register(Gpu)
    assert schema_names(registry) == ["cpu"]
    assert names(registry.active()) == ["cpu"]
    assert registry.instructions() == "## cpu\nAlways here."
    refused = registry.invoke("gpu")
    assert refused.status is CallStatus.DENIED
    assert refused.error == "tool 'gpu' is not available right now"

    state["up"] = True
    assert schema_names(registry) == ["cpu", "gpu"]
    assert registry.instructions() == "## cpu\nAlways here.\n\n## gpu\nUse the GPU."
    assert registry.invoke("gpu").output == "ran"


def test_function_tool_hooks(registry: ToolRegistry) -> None:
    undone: list[dict[str, Any]] = []

    @registry.tool(
        instructions=lambda ctx=None: f"run {ctx.run_id if ctx else '-'}",
        approval_metadata={"warning": "writes"},
        preview=lambda path: {"would_write": path},
        undo=undone.append,
        is_available=lambda: True,
    )
    def write(path: str) -> str:
        return path

    @registry.tool
    def bare() -> None:
        return None

    assert write.has_preview and write.has_undo
    assert not bare.has_preview and not bare.has_undo
    assert write.preview(path="a") == {"would_write": "a"}
    assert write.approval_metadata() == {"warning": "writes"}
    assert bare.approval_metadata() is None
    assert bare.preview() is None
    assert registry.instructions(ToolContext(run_id="r9")) == "## write\nrun r9"
    write.undo({"path": "a"})
    assert undone == [{"path": "a"}]
    with pytest.raises(NotImplementedError, match="'bare' cannot be undone"):
        bare.undo({})


def test_validate_args_refusal_is_invalid_arguments(registry: ToolRegistry) -> None:
    ran: list[int] = []

    class Positive(Tool):
        name = "positive"
        description = "d"

        def validate_args(self, n: int) -> tuple[bool, str]:
            return (n > 0, "n must be positive")

        def execute(self, n: int) -> int:
            ran.append(n)
            return n

    registry.register(Positive)
    refused = registry.invoke("positive", {"n": -1})
    assert refused.status is CallStatus.FAILED
    assert refused.error_type == "invalid_arguments"
    assert refused.error == "invalid arguments for 'positive': n must be positive"
    assert registry.invoke("positive", {"n": 2}).output == 2
    assert ran == [2]


def test_behaviors_and_approval_attributes() -> None:
    class Edit(Tool):
        name = "edit"
        description = "d"
        allowed_behaviors = ("doc_edit", "review")
        requires_approval = True

        def execute(self) -> None:
            return None

    edit = Edit()
    assert edit.is_behavior_allowed("doc_edit")
    assert not edit.is_behavior_allowed("chat")
    assert not edit.is_behavior_allowed(None)
    assert Echo().is_behavior_allowed(None) and Echo().is_behavior_allowed("anything")
    assert edit.needs_approval({}) is True


# -- invoke -------------------------------------------------------------------------------------


def test_invoke_inside_a_running_loop_is_refused(registry: ToolRegistry) -> None:
    registry.register(Echo)

    async def main() -> str:
        with pytest.raises(RuntimeError, match=r"event loop; use `await registry\.ainvoke"):
            registry.invoke("echo", {"text": "x"})
        result = await registry.ainvoke("echo", {"text": "y"}, call_id="c-1")
        assert result.call_id == "c-1"
        return str(result.output)

    assert asyncio.run(main()) == "y"


def test_invoke_fills_ids_and_uses_the_context(registry: ToolRegistry) -> None:
    @registry.tool
    def ids(ctx: ToolContext) -> dict[str, Any]:
        return {
            "call": ctx.call_id,
            "tc": ctx.tool_call_id,
            "run": ctx.run_id,
            "tool": ctx.tool_name,
        }

    generated = registry.invoke("ids")
    assert len(generated.call_id) == 32 and generated.tool_call_id == generated.call_id
    assert generated.output["call"] == generated.call_id

    ctx = ToolContext(run_id="run-1", tool_call_id="toolu_1")
    given = registry.invoke("ids", call_id="c-2", context=ctx)
    assert given.output == {"call": "c-2", "tc": "toolu_1", "run": "run-1", "tool": "ids"}
    assert (given.call_id, given.tool_call_id, given.run_id) == ("c-2", "toolu_1", "run-1")


def test_repr(registry: ToolRegistry) -> None:
    registry.register(Echo)
    assert repr(registry) == "<ToolRegistry 1 tools>"
    assert repr(registry["echo"]) == "<Echo 'echo' risk=moderate>"
