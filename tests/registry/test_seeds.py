"""Each seed document's registry-level example, ported to toolq and run in process."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

import toolq
from toolq import (
    CallResult,
    CallStatus,
    RiskLevel,
    TextContent,
    Tool,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolRegistry,
)
from toolq.errors import InvalidArgumentsError

# -- roura_agent: raw JSON-schema parameters, preview, validate_args ------------------------------


class TimestampTool(Tool):
    """Get the current timestamp."""

    name = "custom.timestamp"
    description = "Get the current UTC timestamp"
    risk_level = RiskLevel.SAFE
    parameters = {
        "type": "object",
        "properties": {
            "format": {
                "type": "string",
                "description": "Output format (iso, unix, human)",
                "enum": ["iso", "unix", "human"],
                "default": "iso",
            }
        },
    }

    def execute(self, format: str = "iso") -> ToolOutput:
        now = datetime.now(UTC)
        if format == "unix":
            output: dict[str, Any] = {"timestamp": int(now.timestamp())}
        elif format == "human":
            output = {"timestamp": now.strftime("%B %d, %Y at %H:%M UTC")}
        else:
            output = {"timestamp": now.isoformat().replace("+00:00", "Z")}
        return ToolOutput.ok(output)


class ReplaceTool(Tool):
    """Replace text in files."""

    name = "custom.replace"
    description = "Replace all occurrences of text in a file"
    risk_level = RiskLevel.MODERATE
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path"},
            "old": {"type": "string", "description": "Text to find"},
            "new": {"type": "string", "description": "Replacement text"},
        },
        "required": ["path", "old", "new"],
    }

    def preview(self, path: str, old: str, new: str) -> dict[str, Any]:
        try:
            content = Path(path).read_text()
        except FileNotFoundError:
            return {"error": f"File not found: {path}"}
        count = content.count(old)
        return {"path": path, "occurrences": count, "sample": content[:200] if count else None}

    def execute(self, path: str, old: str, new: str) -> ToolOutput:
        file = Path(path)
        content = file.read_text()
        count = content.count(old)
        if count == 0:
            return ToolOutput.fail(f"Text '{old}' not found in {path}")
        file.write_text(content.replace(old, new))
        return ToolOutput.ok({"replaced": count, "path": path})


class FetchTool(Tool):
    """Fetch content from a URL."""

    name = "custom.fetch"
    description = "Fetch content from a URL"
    risk_level = RiskLevel.MODERATE
    parameters = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "URL to fetch"},
            "timeout": {"type": "integer", "description": "Timeout in seconds"},
        },
        "required": ["url"],
    }

    def __init__(self) -> None:
        self.fetched: list[str] = []  # the calls that got past validation
        super().__init__()

    def validate_args(self, url: str, timeout: int = 30) -> tuple[bool, str]:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https"):
            return False, "URL must use http or https"
        if not parsed.netloc:
            return False, "URL must have a host"
        if timeout < 1 or timeout > 300:
            return False, "Timeout must be between 1 and 300 seconds"
        return True, ""

    def execute(self, url: str, timeout: int = 30) -> ToolOutput:
        self.fetched.append(url)  # toolq ran validate_args already; no network in tests
        return ToolOutput.ok({"url": url, "timeout": timeout})


def test_roura_timestamp_tool_with_an_enum_parameter() -> None:
    registry = ToolRegistry()
    registry.register(TimestampTool)

    (definition,) = registry.schemas("openai")
    assert definition["function"]["name"] == "custom.timestamp"
    assert definition["function"]["parameters"]["properties"]["format"]["enum"] == [
        "iso",
        "unix",
        "human",
    ]

    iso = registry.invoke("custom.timestamp")  # the schema default fills in "iso"
    stamp = iso.output["timestamp"]
    assert stamp.endswith("Z")
    assert abs(datetime.fromisoformat(stamp[:-1]).timestamp() - time.time()) < 60

    unix = registry.invoke("custom.timestamp", {"format": "unix"}).output["timestamp"]
    assert isinstance(unix, int) and abs(unix - time.time()) < 60

    human = registry.invoke("custom.timestamp", {"format": "human"}).output["timestamp"]
    assert re.fullmatch(r"[A-Z][a-z]+ \d{2}, \d{4} at \d{2}:\d{2} UTC", human)

    refused = registry.invoke("custom.timestamp", {"format": "rfc2822"})
    assert refused.status is CallStatus.FAILED
    assert refused.error_type == "invalid_arguments"
    assert "format: 'rfc2822' is not one of ['iso', 'unix', 'human']" in (refused.error or "")


def test_roura_replace_tool_preview(tmp_path: Path) -> None:
    registry = ToolRegistry()
    replace = registry.register(ReplaceTool)
    target = tmp_path / "notes.txt"
    target.write_text("cat sat on the cat mat")
    args = {"path": str(target), "old": "cat", "new": "dog"}

    assert replace.has_preview
    assert replace.risk is RiskLevel.MODERATE
    assert replace.preview(**replace.validate(args)) == {
        "path": str(target),
        "occurrences": 2,
        "sample": "cat sat on the cat mat",
    }
    assert target.read_text() == "cat sat on the cat mat"  # a preview changes nothing
    missing = str(tmp_path / "missing.txt")
    assert replace.preview(path=missing, old="a", new="b") == {
        "error": f"File not found: {missing}"
    }

    done = registry.invoke("custom.replace", args)
    assert done.output == {"replaced": 2, "path": str(target)}
    assert target.read_text() == "dog sat on the dog mat"
    again = registry.invoke("custom.replace", args)
    assert (again.status, again.error) == (CallStatus.FAILED, f"Text 'cat' not found in {target}")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"url": "ftp://example.com/file"}, "URL must use http or https"),
        ({"url": "https://"}, "URL must have a host"),
        ({"url": "https://example.com", "timeout": 0}, "Timeout must be between 1 and 300 seconds"),
        ({"url": "https://a.example", "timeout": 301}, "Timeout must be between 1 and 300 seconds"),
    ],
)
def test_roura_fetch_tool_validate_args_refusals(args: dict[str, Any], reason: str) -> None:
    registry = ToolRegistry()
    fetch = registry.register(FetchTool)
    assert isinstance(fetch, FetchTool)

    refused = registry.invoke("custom.fetch", args)
    assert refused.status is CallStatus.FAILED
    assert refused.error_type == "invalid_arguments"
    assert refused.error == f"invalid arguments for 'custom.fetch': {reason}"
    assert fetch.fetched == []
    with pytest.raises(InvalidArgumentsError):
        fetch.validate(args)

    ok = registry.invoke("custom.fetch", {"url": "https://example.com", "timeout": 10})
    assert ok.output == {"url": "https://example.com", "timeout": 10}
    assert fetch.fetched == ["https://example.com"]
    # roura's get_by_risk and remove
    assert [t.name for t in registry.get_by_risk(RiskLevel.MODERATE)] == ["custom.fetch"]
    assert registry.remove("custom.fetch") is True
    assert registry.get("custom.fetch") is None


# -- codomyrmex: @tool with tags, search, invoke with duration -------------------------------------


def test_codomyrmex_tags_search_and_invoke() -> None:
    registry = ToolRegistry()

    @registry.tool("math.add", description="Add two numbers", tags=["math", "arithmetic"])
    def add(a: float, b: float) -> float:
        return a + b

    @registry.tool("math.sqrt", description="Square root", tags=["math"])
    def sqrt(x: float) -> float:
        return float(x**0.5)

    @registry.tool("text.Upper", description="Upper-case text", tags=["text"])
    def upper(text: str) -> str:
        return text.upper()

    def found(**query: Any) -> list[str]:
        return [t.name for t in registry.search(**query)]

    assert registry.list_names() == ["math.add", "math.sqrt", "text.Upper"]
    assert found(tags=["math"]) == ["math.add", "math.sqrt"]
    assert found(tags=["arithmetic", "text"]) == ["math.add", "text.Upper"]
    assert found(tags=["math", "arithmetic"], match_all_tags=True) == ["math.add"]
    assert found(name_contains="UPPER") == ["text.Upper"]
    assert found(name_contains="math", tags=["arithmetic"]) == ["math.add"]
    assert len(registry) == 3 and "math.add" in registry

    result = registry.invoke("math.add", {"a": 2, "b": 3.5})
    assert (result.status, result.output) == (CallStatus.SUCCEEDED, 5.5)
    assert result.duration_ms is not None and result.duration_ms > 0

    bad = registry.invoke("math.sqrt", {"x": "nine"})
    assert bad.status is CallStatus.FAILED
    assert bad.error_type == "invalid_arguments"
    assert "x: Input should be a valid number" in (bad.error or "")
    assert bad.duration_ms is not None and bad.duration_ms > 0


# -- MassGen: categories, streaming with content blocks --------------------------------------------


def test_massgen_categories_enabled_and_disabled() -> None:
    registry = ToolRegistry()
    registry.setup_category("data_science", description="Data analysis tools", enabled=True)

    @registry.tool(category="data_science")
    def analyze_data(rows: list[float]) -> float:
        """Average the rows."""
        return sum(rows) / len(rows)

    @registry.tool
    def my_tool(param: str) -> ToolOutput:
        """My custom tool."""
        return ToolOutput.text(f"Processed: {param}")

    def visible() -> list[str]:
        return [s["function"]["name"] for s in registry.schemas()]

    assert visible() == ["analyze_data", "my_tool"]
    assert registry.invoke("analyze_data", {"rows": [1, 2, 3]}).output == 2
    assert registry.invoke("my_tool", {"param": "test"}).content == [
        TextContent(text="Processed: test")
    ]

    registry.set_categories_enabled(["data_science"], False)
    assert visible() == ["my_tool"]
    refused = registry.invoke("analyze_data", {"rows": [1.0]})
    assert refused.status is CallStatus.DENIED
    assert "category 'data_science' is disabled" in (refused.error or "")

    registry.set_categories_enabled(["data_science"], True)
    assert visible() == ["analyze_data", "my_tool"]
    registry.delete_category("data_science")
    assert visible() == ["my_tool"]
    assert registry.invoke("analyze_data", {"rows": [1.0]}).error_type == "tool_not_found"


def test_massgen_streaming_tool_with_text_blocks() -> None:
    registry = ToolRegistry()

    @registry.tool
    async def streaming_tool(steps: int = 5) -> AsyncIterator[TextContent]:
        """Tool that streams progress updates."""
        yield TextContent(text="Starting...")
        for i in range(steps):
            await asyncio.sleep(0)
            yield TextContent(text=f"Progress: {(i + 1) * 100 // steps}%")
        yield TextContent(text="Complete!")

    progress: list[Any] = []
    result = registry.invoke("streaming_tool", context=ToolContext(progress_sink=progress.append))
    assert result.status is CallStatus.SUCCEEDED
    assert result.content == [TextContent(text="Complete!")]
    assert [p["text"] for p in progress] == [
        "Starting...",
        "Progress: 20%",
        "Progress: 40%",
        "Progress: 60%",
        "Progress: 80%",
        "Progress: 100%",
        "Complete!",
    ]
    assert all(p["type"] == "text" for p in progress)


# -- pai-agent-sdk: hooks in order, error recovery, instructions, approval metadata ----------------


class ReadFileTool(Tool):
    name = "read_file"
    description = "Read contents of a file"

    def __init__(self, root: Path) -> None:
        self.root = root
        super().__init__()

    def is_available(self) -> bool:
        return self.root.is_dir()

    def instructions(self, ctx: ToolContext | None = None) -> str:
        return f"Use read_file for files under {self.root.name}/."

    def get_approval_metadata(self) -> dict[str, Any]:
        return {"reason": "reads files"}

    def approval_metadata(self) -> dict[str, Any] | None:
        return self.get_approval_metadata()

    async def execute(self, ctx: ToolContext, path: str) -> str:
        return (self.root / path).read_text()


class ShellTool(Tool):
    name = "shell"
    description = "Execute shell commands"
    risk = RiskLevel.DANGEROUS

    def approval_metadata(self) -> dict[str, Any] | None:
        return {"warning": "This will execute a shell command", "risk_level": "high"}

    def execute(self, command: str) -> str:
        return f"would run {command}"


def test_pai_hooks_order_error_recovery_instructions_and_approval(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    registry = ToolRegistry()
    registry.register(ReadFileTool(tmp_path))
    registry.register(ShellTool)
    log: list[str] = []

    async def global_pre(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        log.append(f"global_pre:{ctx.tool_name}")
        return args

    async def tool_pre(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        log.append("tool_pre")
        return {**args, "path": args["path"].lstrip("/")}

    async def tool_post(ctx: ToolContext, result: Any) -> Any:
        log.append(f"tool_post:{type(result).__name__}")
        if isinstance(result, FileNotFoundError):
            return "File not found. Please check the path."
        return result

    async def global_post(ctx: ToolContext, result: Any) -> Any:
        log.append(f"global_post:{type(result).__name__}")
        return result

    registry.before(global_pre)
    registry.after(global_post)
    registry.before(tool_pre, tool="read_file")
    registry.after(tool_post, tool="read_file")

    ok = registry.invoke("read_file", {"path": "/a.txt"})
    assert ok.output == "alpha"
    assert log == ["global_pre:read_file", "tool_pre", "tool_post:str", "global_post:str"]

    log.clear()
    recovered = registry.invoke("read_file", {"path": "missing.txt"})
    assert recovered.status is CallStatus.SUCCEEDED
    assert recovered.output == "File not found. Please check the path."
    assert log == [
        "global_pre:read_file",
        "tool_pre",
        "tool_post:FileNotFoundError",
        "global_post:str",
    ]

    log.clear()
    assert registry.invoke("shell", {"command": "ls"}).output == "would run ls"
    assert log == ["global_pre:shell", "global_post:str"]  # only global hooks on shell

    # get_instruction -> instructions(); get_approval_metadata -> approval_metadata()
    expected = f"## read_file\nUse read_file for files under {tmp_path.name}/."
    assert registry.instructions() == expected
    assert registry["read_file"].approval_metadata() == {"reason": "reads files"}
    assert registry["shell"].approval_metadata() == {
        "warning": "This will execute a shell command",
        "risk_level": "high",
    }
    # is_available False: skipped from schemas and instructions, calls refused
    (tmp_path / "a.txt").unlink()
    tmp_path.rmdir()
    assert [s["name"] for s in registry.schemas("anthropic")] == ["shell"]
    assert registry.instructions() == ""
    assert registry.invoke("read_file", {"path": "a.txt"}).status is CallStatus.DENIED


# -- stageflow: GreetTool, undoable edit, behavior gating, parse_and_resolve -----------------------


class GreetTool(Tool):
    name = "greet"
    description = "Greet a user"

    async def execute(self, name: str = "World") -> ToolOutput:
        return ToolOutput.ok(data={"message": f"Hello, {name}!"})


def test_stageflow_greet_tool() -> None:
    registry = ToolRegistry()
    registry.register(GreetTool())
    assert registry.has("greet")
    assert [t.name for t in registry.list()] == ["greet"]
    assert registry.invoke("greet", {"name": "Alice"}).output == {"message": "Hello, Alice!"}
    assert registry.invoke("greet").output == {"message": "Hello, World!"}


def test_stageflow_edit_document_with_undo_and_behavior_gating() -> None:
    documents = {"doc-1": "first draft"}
    registry = ToolRegistry()

    def edit_undo(undo_data: dict[str, Any]) -> None:
        documents[undo_data["doc_id"]] = undo_data["original"]

    @registry.tool(requires_approval=True, allowed_behaviors=("doc_edit",), undo=edit_undo)
    async def edit_document(document_id: str, content: str) -> ToolOutput:
        original = documents[document_id]
        documents[document_id] = content
        return ToolOutput.ok(
            data={"updated": True},
            undo_metadata={"doc_id": document_id, "original": original},
        )

    assert edit_document.is_behavior_allowed("doc_edit")
    assert not edit_document.is_behavior_allowed("chat")
    assert not edit_document.is_behavior_allowed(None)
    assert edit_document.needs_approval({"document_id": "doc-1", "content": "x"}) is True
    assert edit_document.has_undo

    result = registry.invoke(
        "edit_document",
        {"document_id": "doc-1", "content": "second draft"},
        context=ToolContext(behavior="doc_edit"),
    )
    assert result.output == {"updated": True}
    assert result.undo == {"doc_id": "doc-1", "original": "first draft"}
    assert documents["doc-1"] == "second draft"

    edit_document.undo(result.undo)
    assert documents["doc-1"] == "first draft"


@dataclass(frozen=True)
class Resolved:
    tool: Tool
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Unresolved:
    call_id: str
    name: str
    error: str


def parse_and_resolve(
    registry: ToolRegistry, tool_calls: list[dict[str, Any]]
) -> tuple[list[Resolved], list[Unresolved]]:
    resolved: list[Resolved] = []
    unresolved: list[Unresolved] = []
    calls: list[ToolCall] = toolq.parse_tool_calls(tool_calls)
    for call in calls:
        tool = registry.get(call.name)
        if call.error is not None:
            unresolved.append(Unresolved(call.id, call.name, call.error))
        elif tool is None:
            unresolved.append(Unresolved(call.id, call.name, f"unknown tool {call.name!r}"))
        else:
            resolved.append(Resolved(tool, call.id, call.name, call.arguments))
    return resolved, unresolved


def test_stageflow_parse_and_resolve_provider_calls() -> None:
    registry = ToolRegistry()
    memories: list[str] = []

    @registry.tool
    def store_memory(content: str) -> dict[str, int]:
        memories.append(content)
        return {"stored": len(memories)}

    tool_calls = [
        {
            "id": "call_123",
            "type": "function",
            "function": {"name": "store_memory", "arguments": '{"content": "hello"}'},
        },
        {
            "id": "call_456",
            "type": "function",
            "function": {"name": "launch_rockets", "arguments": "{}"},
        },
        {
            "id": "call_789",
            "type": "function",
            "function": {"name": "store_memory", "arguments": '{"content": "unterminated'},
        },
    ]
    resolved, unresolved = parse_and_resolve(registry, tool_calls)

    assert [(r.call_id, r.name, r.arguments) for r in resolved] == [
        ("call_123", "store_memory", {"content": "hello"})
    ]
    assert resolved[0].tool is store_memory
    assert [(u.call_id, u.name) for u in unresolved] == [
        ("call_456", "launch_rockets"),
        ("call_789", "store_memory"),
    ]
    assert unresolved[0].error == "unknown tool 'launch_rockets'"
    assert unresolved[1].error.startswith("arguments are not valid JSON")

    results: list[CallResult] = [
        registry.invoke(r.name, r.arguments, context=ToolContext(tool_call_id=r.call_id))
        for r in resolved
    ]
    assert [(r.tool_call_id, r.output) for r in results] == [("call_123", {"stored": 1})]
    assert memories == ["hello"]
