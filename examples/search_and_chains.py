"""Tagged tools found by search, invoked in process and on a worker, and a ToolChain.

Ported from codomyrmex's tool_use example. Run it against a local stack from the repository
root, with the same ``TOOLQ_REDIS_URL`` in both shells::

    toolq dev --app examples.search_and_chains:registry   # shell 1
    python -m examples.search_and_chains                  # shell 2

It registers tools with ``@registry.tool`` and tags, searches them by any/all tags and by name,
invokes one in process and one on a worker (both report ``duration_ms``), prints a tool as an
MCP definition, validates a broken chain, and runs codomyrmex's fetch → parse chain (plus a
third step) where every step is a queued call and later steps read earlier outputs through
dot-notation paths.
"""

from __future__ import annotations

import uuid

from examples._shared import connect, expect, run, show
from toolq import Client, ToolRegistry
from toolq.chains import ChainStep, ToolChain

registry = ToolRegistry()


@registry.tool("math.add", description="Add two numbers", tags=("math", "arithmetic"))
def add(a: float, b: float) -> dict[str, float]:
    """Add two numbers."""
    return {"sum": a + b}


@registry.tool("math.sqrt", description="Square root", tags=("math",))
def sqrt(x: float) -> float:
    """Square root of x."""
    return float(x**0.5)


@registry.tool("text.word_count", description="Count words", tags=("text", "analysis"))
def word_count(text: str) -> dict[str, int]:
    """Count the words of a text."""
    return {"words": len(text.split())}


@registry.tool("fetch", description="Fetch data", tags=("io",))
def fetch(url: str = "") -> dict[str, str]:
    """Fetch a URL (canned, so the example needs no network)."""
    return {"body": f"content for {url}"}


@registry.tool("parse", description="Parse content", tags=("text",))
def parse(content: str) -> dict[str, str]:
    """Upper-case the content."""
    return {"parsed": content.upper()}


def example(client: Client) -> None:
    """Search, invoke with duration, MCP definition, chain validation and execution."""

    def names(**query: object) -> list[str]:
        return [t.name for t in registry.search(**query)]  # type: ignore[arg-type]

    print(f"{registry!r}: {registry.list_names()}")
    any_tag = names(tags=["math", "analysis"])
    all_tags = names(tags=["math", "arithmetic"], match_all_tags=True)
    by_name = names(name_contains="MATH")
    show(
        "search",
        {
            "any of math/analysis": any_tag,
            "all of math+arithmetic": all_tags,
            "name contains MATH": by_name,
        },
    )
    expect(any_tag == ["math.add", "math.sqrt", "text.word_count"], "tag search (any) wrong")
    expect(all_tags == ["math.add"], "tag search (all) wrong")
    expect(by_name == ["math.add", "math.sqrt"], "name search wrong")

    local = registry.invoke("math.add", {"a": 2, "b": 3})
    remote = client.call("math.sqrt", {"x": 16}, timeout=60)
    print(f"in process: math.add -> {local.output} in {local.duration_ms:.2f} ms")
    print(f"on a worker: math.sqrt -> {remote.output} in {remote.duration_ms or 0:.2f} ms")
    expect(local.output == {"sum": 5} and remote.output == 4.0, "invoke went wrong")
    expect(remote.duration_ms is not None, "no duration from the worker")
    invalid = registry.invoke("math.sqrt", {"x": "nine"})
    print(f"invalid input: {invalid.status.value}: {invalid.error}")

    [mcp] = [s for s in registry.schemas("mcp") if s["name"] == "parse"]
    show("as an MCP tool", mcp)

    broken = ToolChain(client).add_step(ChainStep("fetch", output_key="raw"))
    broken.add_step(ChainStep("render", {"content": "raw..body"}))
    check = broken.validate()
    show("broken chain", check.to_dict())
    expect(not check.valid and len(check.errors) == 2, "validate() missed a problem")

    chain = (
        ToolChain(client)
        .add_step(ChainStep(tool_name="fetch", output_key="raw"))
        .add_step(
            ChainStep(tool_name="parse", input_mapping={"content": "raw.body"}, output_key="result")
        )
        .add_step(
            ChainStep(
                tool_name="text.word_count",
                input_mapping={"text": "context.result.parsed"},
                output_key="stats",
            )
        )
    )
    print(repr(chain))
    result = chain.execute(
        {"url": "https://example.com"}, run_id=f"chain-{uuid.uuid4().hex[:8]}", timeout=60
    )
    show("chain", {k: v for k, v in result.to_dict().items() if k != "step_results"})
    expect(result.success, f"chain failed: {result.errors}")
    expect(result.context["result"] == {"parsed": "CONTENT FOR HTTPS://EXAMPLE.COM"}, "wrong parse")
    expect(result.context["stats"] == {"words": 3}, "wrong word count")


def main(client: Client | None = None) -> int:
    """Run the example against workers serving this registry."""
    with connect(registry, client) as active:
        return run(example, active)


if __name__ == "__main__":
    raise SystemExit(main())
