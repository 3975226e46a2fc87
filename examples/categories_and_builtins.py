"""Tool categories switched off and on, a streaming tool, the built-in file and python tools.

Ported from MassGen's tool system. Run it against a local stack from the repository root, with
the same ``TOOLQ_REDIS_URL`` and ``TOOLQ_EXAMPLES_DIR`` in both shells (the built-in tools'
workspace is ``$TOOLQ_EXAMPLES_DIR/categories_and_builtins``, default under the temp dir)::

    toolq dev --app examples.categories_and_builtins:registry   # shell 1
    python -m examples.categories_and_builtins                  # shell 2

It runs MassGen's ``custom_tool__my_tool``, prints its schema for each backend, disables the
``data_science`` category (its schema vanishes and its call is denied at dispatch; categories
are state of the dispatching process's registry), streams a progress-reporting async-generator
tool and prints each event as it arrives, then uses ``toolq.builtins``: writes, appends and
reads a CSV in the workspace and runs a DANGEROUS ``run_python`` on it, approved by the script.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator

import toolq.builtins
from examples._shared import connect, example_dir, expect, parked, run, show
from toolq import CallStatus, Client, EventType, TextContent, ToolOutput, ToolRegistry

registry = ToolRegistry()
WORKSPACE = example_dir("categories_and_builtins")  # the built-in tools are jailed to it

registry.setup_category("data_science", description="Data analysis tools", enabled=True)


@registry.tool("custom_tool__my_tool", category="custom")
async def my_tool(param: str) -> ToolOutput:
    """My custom tool.

    Args:
        param: What to process.
    """
    return ToolOutput(content=[TextContent(text=f"Processed: {param}")])


@registry.tool(category="data_science")
def analyze_data(rows: list[float]) -> dict[str, float]:
    """Average some numbers.

    Args:
        rows: The numbers.
    """
    return {"mean": sum(rows) / len(rows)}


@registry.tool(category="custom")
async def streaming_tool(steps: int = 5, delay: float = 0.3) -> AsyncIterator[TextContent]:
    """Tool that streams progress updates.

    Args:
        steps: How many progress updates.
        delay: Seconds between updates.
    """
    yield TextContent(text="Starting...")
    for i in range(steps):
        await asyncio.sleep(delay)
        yield TextContent(text=f"Progress: {(i + 1) * 100 // steps}%")
    yield TextContent(text="Complete!")


registry.include(toolq.builtins.files(root=WORKSPACE))
registry.include(toolq.builtins.python(root=WORKSPACE))


SCRIPT = """\
import csv
with open("data.csv") as f:
    rows = list(csv.DictReader(f))
print("rows:", len(rows), "sum of b:", sum(int(r["b"]) for r in rows))
"""


def example(client: Client) -> None:
    """Custom tool, formatters, categories, streaming, built-in file and Python tools."""
    run_id = f"categories-{uuid.uuid4().hex[:8]}"

    [processed] = client.dispatch(
        [{"id": "t1", "name": "custom_tool__my_tool", "arguments": {"param": "test"}}],
        run_id=run_id,
    ).wait(timeout=60)
    show("custom_tool__my_tool", [block.model_dump() for block in processed.content])
    expect(processed.content == [TextContent(text="Processed: test")], "my_tool went wrong")
    for fmt in ("anthropic", "gemini", "openai", "openai-responses"):
        [schema] = [s for s in registry.schemas(fmt) if "my_tool" in json.dumps(s)]
        print(f"{fmt:>16}: {json.dumps(schema)[:110]}...")

    def visible() -> list[str]:
        return [s["name"] for s in registry.schemas("anthropic")]

    expect("analyze_data" in visible(), "analyze_data missing while enabled")
    registry.set_categories_enabled(["data_science"], False)  # MassGen's modify_categories
    try:
        expect("analyze_data" not in visible(), "a disabled tool still has a schema")
        [refused] = client.dispatch(
            [{"id": "t2", "name": "analyze_data", "arguments": {"rows": [1, 2, 3]}}],
            run_id=run_id,
        ).wait(timeout=60)
        print(f"analyze_data while disabled: {refused.status.value}: {refused.error}")
        expect(refused.status is CallStatus.DENIED, "a disabled tool was not refused")
    finally:
        registry.set_categories_enabled(["data_science"], True)
    [mean] = client.dispatch(
        [{"id": "t3", "name": "analyze_data", "arguments": {"rows": [1, 2, 3]}}], run_id=run_id
    ).wait(timeout=60)
    print(f"analyze_data re-enabled: {mean.output}")
    expect(mean.output == {"mean": 2.0}, "analyze_data did not run once re-enabled")

    stream = client.dispatch(
        [{"id": "t4", "name": "streaming_tool", "arguments": {"steps": 5}}], run_id=f"{run_id}-s"
    )
    started = time.monotonic()
    arrivals: list[float] = []
    for event in stream.events(timeout=60):
        elapsed = time.monotonic() - started
        if event.type is EventType.PROGRESS:
            arrivals.append(elapsed)
            print(f"  +{elapsed:4.1f}s progress: {event.data['data']['text']}")
        else:
            print(f"  +{elapsed:4.1f}s {event.type.value}")
    [streamed] = stream.results()
    expect(streamed.content == [TextContent(text="Complete!")], "wrong final streamed result")
    expect(len(arrivals) == 7, f"expected 7 progress events, got {len(arrivals)}")
    expect(arrivals[-1] - arrivals[0] > 1.0, "progress did not arrive while the tool ran")

    edits = [  # one after the other: calls of one batch run in parallel
        ("f1", "write_file", {"path": "data.csv", "content": "a,b\n1,2\n3,4\n"}),
        ("f2", "append_file", {"path": "data.csv", "content": "5,6\n"}),
    ]
    for call_id, name, arguments in edits:
        [edited] = client.dispatch(
            [{"id": call_id, "name": name, "arguments": arguments}], run_id=run_id
        ).wait(timeout=60)
        expect(edited.ok, f"{name} failed: {edited.error}")
    [read] = client.dispatch(
        [{"id": "f3", "name": "read_file", "arguments": {"path": "data.csv"}}], run_id=run_id
    ).wait(timeout=60)
    show("read_file data.csv", read.output)
    expect(read.ok and read.output["content"] == "a,b\n1,2\n3,4\n5,6\n", "file content wrong")

    python = client.dispatch(
        [{"id": "p1", "name": "run_python", "arguments": {"code": SCRIPT}}], run_id=run_id
    )
    [call_id] = python.call_ids
    expect(python.calls[0].status is CallStatus.AWAITING_APPROVAL, "run_python was not parked")
    request = parked(client, call_id)
    print(f"approving {request.name} ({request.risk.value}):\n{request.arguments['code']}")
    client.approvals.approve(call_id, by="example-approver", digest=request.digest)
    [ran] = python.wait(timeout=120)
    show("run_python", ran.output)
    expect(ran.ok and ran.output["stdout"] == "rows: 3 sum of b: 12\n", "run_python went wrong")


def main(client: Client | None = None) -> int:
    """Run the example against workers serving this registry."""
    with connect(registry, client) as active:
        return run(example, active)


if __name__ == "__main__":
    raise SystemExit(main())
