"""Two MCP servers toolq did not write, behind toolq: one queue, approvals, limits, audit.

A files server and a tickets server (``examples/mcp_servers/``, built with the mcp SDK) are
added to a registry with ``registry.mcp_server``; their tools keep their schemas, and their
annotations set the risk (read-only: safe, destructive: dangerous, no hints: dangerous),
overridden here and there. Run it against a local stack from the repository root, with the
same ``TOOLQ_REDIS_URL`` and ``TOOLQ_EXAMPLES_DIR`` in both shells::

    toolq dev --app examples.mcp_gateway:registry   # shell 1: workers hold the sessions
    python -m examples.mcp_gateway                  # shell 2

The same registry behind one MCP endpoint, for an IDE or a desktop assistant::

    toolq mcp --app examples.mcp_gateway:registry

It reads files and tickets in one model turn (on workers, with search progress streamed),
opens a ticket, then makes the calls an approver must see first: closing a ticket (approved,
with the reason edited) and deleting a file (denied, with a message the model reads).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from examples._shared import connect, example_dir, expect, parked, run, show
from toolq import CallStatus, Client, EventType, ToolRegistry

SERVERS = Path(__file__).with_name("mcp_servers")


def files_root() -> Path:
    """The directory the files server serves (seeded with two notes)."""
    root = example_dir("mcp_gateway") / "files"
    root.mkdir(exist_ok=True)
    for name, text in {"plan.md": "ship the gateway\n", "ideas.md": "a gateway for MCP\n"}.items():
        if not (root / name).exists():
            (root / name).write_text(text)
    return root


def tickets_db() -> Path:
    """The tickets server's store."""
    return example_dir("mcp_gateway") / "tickets.json"


registry = ToolRegistry()

registry.mcp_server(
    "files",
    command=[sys.executable, str(SERVERS / "files.py"), "--root", str(files_root())],
    # write_file says it is destructive (dangerous); here it is moderate but still approved
    # by a person, call by call.
    tools={"write_file": {"risk": "moderate", "requires_approval": True}},
)
registry.mcp_server(
    "tickets",
    command=[sys.executable, str(SERVERS / "tickets.py"), "--db", str(tickets_db())],
    tools={"create_*": {"rate_limit": "10/m", "tags": ["writes"]}},
)


def model_turn(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """An OpenAI chat response asking for ``calls``."""
    return {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": f"call_{n}",
                            "type": "function",
                            "function": {"name": name, "arguments": _json(arguments)},
                        }
                        for n, (name, arguments) in enumerate(calls)
                    ],
                }
            }
        ]
    }


def _json(value: Any) -> str:
    return json.dumps(value)


def example(client: Client) -> None:
    """Read, write and ask for approval through the two upstream servers."""
    print("tools the model (and `toolq mcp`) is offered, with the risk toolq gives them:")
    for tool in registry.list():
        print(f"  {tool.name:24} {tool.risk.value:9} {tool.description}")
    expect(registry.require("files_read_file").risk.value == "safe", "read_file is read-only")
    expect(registry.require("tickets_page_on_call").risk.value == "dangerous", "no hints")

    reads = client.dispatch(
        model_turn(
            ("files_list_files", {}),
            ("files_search", {"word": "gateway"}),
            ("tickets_list_tickets", {}),
        ),
        run_id="gateway-reads",
    )
    results = reads.wait(timeout=60)
    expect(all(r.status is CallStatus.SUCCEEDED for r in results), f"reads: {results}")
    events = client.events("gateway-reads")
    progress = [e.data["data"] for e in events if e.type is EventType.PROGRESS]
    print(f"search progress events: {[p['message'] for p in progress]}")
    expect(len(progress) == 2, "one progress event per file searched")
    for message in client.to_messages("gateway-reads", "openai"):
        print(f"  tool message {message['tool_call_id']}: {message['content']}")

    opened = client.dispatch(
        model_turn(("tickets_create_ticket", {"title": "Gateway docs"})), run_id="gateway-writes"
    ).wait(timeout=60)[0]
    expect(opened.status is CallStatus.SUCCEEDED, f"create_ticket: {opened.error}")
    show("opened (moderate: ran without approval)", opened.output)

    risky = client.dispatch(
        model_turn(
            ("tickets_close_ticket", {"id": 1, "reason": "fixed"}),
            ("files_delete_file", {"name": "plan.md"}),
        ),
        run_id="gateway-risky",
        principal="agent",
    )
    close_id, delete_id = risky.call_ids
    shown = {}
    for call_id in risky.call_ids:
        request = parked(client, call_id)
        shown[call_id] = request.digest
        print(f"approver sees: {request.name} {request.arguments} {request.approval_metadata}")
    client.approvals.approve(
        close_id,
        by="alice",
        arguments={"id": 1, "reason": "fixed: extinguished"},
        digest=shown[close_id],
    )
    client.approvals.deny(delete_id, by="alice", reason="keep the plan; archive it instead")
    closed, deleted = risky.wait(timeout=60)
    expect(closed.status is CallStatus.SUCCEEDED, f"close_ticket: {closed.error}")
    expect(closed.output["reason"] == "fixed: extinguished", "the edited reason reached it")
    expect(deleted.status is CallStatus.DENIED, "delete_file was denied")
    expect((files_root() / "plan.md").exists(), "the file is still there")
    for message in client.to_messages("gateway-risky", "anthropic"):
        for block in message["content"]:
            print(f"  {block['tool_use_id']}: {block['content']}")


def main(client: Client | None = None) -> int:
    """Run the example against workers serving this registry."""
    with connect(registry, client) as active:
        return run(example, active)


if __name__ == "__main__":
    raise SystemExit(main())
