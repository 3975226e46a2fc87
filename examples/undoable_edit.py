"""An edit approved on its diff, then undone; behavior gating; provider calls resolved.

Ported from stageflow's tools example. Run it against a local stack from the repository root,
with the same ``TOOLQ_REDIS_URL`` in both shells::

    toolq dev --app examples.undoable_edit:registry   # shell 1
    python -m examples.undoable_edit                  # shell 2

It triages provider tool calls into resolved and unresolved, greets Alice on a worker, edits a
document (kept in a JSON file under ``$TOOLQ_EXAMPLES_DIR``, default the temp dir, so workers
and script share it) after approving it on the approver's diff, undoes the edit, and shows that
``allowed_behaviors`` refuses the edit outside ``doc_edit``.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import toolq
from examples._shared import connect, example_dir, expect, parked, run, show
from toolq import CallStatus, Client, Tool, ToolCall, ToolOutput, ToolRegistry

registry = ToolRegistry()


# -- a simple tool (stageflow's BaseTool) -------------------------------------------------------


class GreetTool(Tool):
    """Greet a user."""

    name = "greet"
    description = "Greet a user"
    action_type = "GREET"  # stageflow's routing key; toolq routes by name

    async def execute(self, name: str = "World") -> ToolOutput:
        """Say hello.

        Args:
            name: Who to greet.
        """
        return ToolOutput.ok(data={"message": f"Hello, {name}!"})


registry.register(GreetTool)


# -- an undoable tool that needs approval (stageflow's ToolDefinition) ---------------------------


def documents_file() -> Path:
    """The JSON document store the workers and this script share."""
    return example_dir("undoable_edit") / "documents.json"


def get_document(doc_id: str) -> str:
    """A document's content."""
    documents: dict[str, str] = json.loads(documents_file().read_text())
    return documents[doc_id]


def set_document(doc_id: str, content: str) -> None:
    """Replace a document's content (atomically, other processes read the file)."""
    path = documents_file()
    documents = json.loads(path.read_text()) if path.exists() else {}
    documents[doc_id] = content
    scratch = path.with_suffix(f".{uuid.uuid4().hex}.tmp")
    scratch.write_text(json.dumps(documents))
    os.replace(scratch, path)


def edit_preview(document_id: str, content: str) -> dict[str, Any]:
    """What approvers see: before and after, which toolq turns into a diff."""
    return {"path": document_id, "before": get_document(document_id), "after": content}


def edit_undo(undo_data: dict[str, Any]) -> None:
    """Put the original content back."""
    set_document(undo_data["doc_id"], undo_data["original"])


@registry.tool(
    requires_approval=True,
    allowed_behaviors=("doc_edit",),
    undo=edit_undo,
    preview=edit_preview,
    approval_metadata={"message": "The assistant wants to change a document."},
)
async def edit_document(document_id: str, content: str) -> ToolOutput:
    """Replace a document's content.

    Args:
        document_id: Which document.
        content: Its new content.
    """
    original = get_document(document_id)
    set_document(document_id, content)
    return ToolOutput.ok(
        data={"updated": True},
        undo_metadata={"doc_id": document_id, "original": original},
    )


# -- parse_and_resolve -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResolvedToolCall:
    """A provider call whose tool exists and whose arguments parsed."""

    tool: Tool
    call_id: str
    name: str
    arguments: dict[str, Any]
    raw: ToolCall | None = None


@dataclass(frozen=True, slots=True)
class UnresolvedToolCall:
    """A provider call that cannot run, with the reason."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    error: str
    raw: ToolCall | None = None


def parse_and_resolve(
    tool_calls: Any,
) -> tuple[list[ResolvedToolCall], list[UnresolvedToolCall]]:
    """Split provider tool calls (any format toolq reads) into resolved and unresolved."""
    resolved: list[ResolvedToolCall] = []
    unresolved: list[UnresolvedToolCall] = []
    for call in toolq.parse_tool_calls(tool_calls):
        tool = registry.get(call.name)
        if call.error is not None or tool is None:
            error = call.error or f"unknown tool {call.name!r}"
            unresolved.append(UnresolvedToolCall(call.id, call.name, call.arguments, error, call))
        else:
            resolved.append(ResolvedToolCall(tool, call.id, call.name, call.arguments, call))
    return resolved, unresolved


# -- the example -------------------------------------------------------------------------------

TOOL_CALLS = [  # an OpenAI-style assistant turn
    {
        "id": "call_123",
        "type": "function",
        "function": {"name": "greet", "arguments": '{"name": "Alice"}'},
    },
    {
        "id": "call_456",
        "type": "function",
        "function": {
            "name": "edit_document",
            "arguments": '{"document_id": "doc-1", "content": "second draft\\nwith a new line"}',
        },
    },
    {
        "id": "call_789",
        "type": "function",
        "function": {"name": "launch_rockets", "arguments": "{}"},
    },
    {
        "id": "call_000",
        "type": "function",
        "function": {"name": "greet", "arguments": '{"name": "Bo'},
    },
]


def example(client: Client) -> None:
    """Triage, greet, edit with approval and a diff, undo, behavior gating."""
    set_document("doc-1", "first draft")
    run_id = f"edit-{uuid.uuid4().hex[:8]}"

    resolved, unresolved = parse_and_resolve(TOOL_CALLS)
    for bad in unresolved:
        show("tools.unresolved", {"call_id": bad.call_id, "error": bad.error})
    expect([c.call_id for c in resolved] == ["call_123", "call_456"], "wrong calls resolved")
    expect([c.call_id for c in unresolved] == ["call_789", "call_000"], "wrong calls unresolved")

    batch = client.dispatch(
        [{"id": c.call_id, "name": c.name, "arguments": c.arguments} for c in resolved],
        run_id=run_id,
        behavior="doc_edit",
    )
    edit_id = batch.call_ids[1]
    expect(client.result(edit_id).status is CallStatus.AWAITING_APPROVAL, "edit was not parked")

    request = parked(client, edit_id, preview=True)
    show("approval requested", request.approval_metadata)
    print(request.diff["diff_output"] if request.diff else "(no diff)")
    expect(get_document("doc-1") == "first draft", "the document changed before approval")
    client.approvals.approve(edit_id, by="example-approver", digest=request.digest)

    greeting, edited = batch.wait(timeout=60)
    show("greet", greeting.output)
    expect(greeting.output == {"message": "Hello, Alice!"}, "unexpected greeting")
    show("edit_document", {"output": edited.output, "undo": edited.undo})
    expect(get_document("doc-1") == "second draft\nwith a new line", "the edit did not land")

    undone = client.undo(edit_id, timeout=60)
    print(f"{undone.type.value}: document is back to {get_document('doc-1')!r}")
    expect(get_document("doc-1") == "first draft", "undo did not restore the document")

    gated = client.dispatch(
        [{"id": "call_chat", "name": "edit_document", "arguments": resolved[1].arguments}],
        run_id=run_id,
        behavior="chat",
    ).wait(timeout=60)[0]
    print(f"edit_document in behavior 'chat': {gated.status.value}: {gated.error}")
    expect(gated.status is CallStatus.DENIED, "behavior gating did not refuse the edit")


def main(client: Client | None = None) -> int:
    """Run the example against workers serving this registry."""
    with connect(registry, client) as active:
        return run(example, active)


if __name__ == "__main__":
    raise SystemExit(main())
