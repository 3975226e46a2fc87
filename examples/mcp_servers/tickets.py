"""A small tickets server for the MCP gateway example: another upstream toolq did not write.

Built with the mcp SDK's ``MCPServer``, over stdio, keeping its tickets in a JSON file::

    python examples/mcp_servers/tickets.py --db tickets.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("tickets", instructions="A team's tickets.")
DB = Path("tickets.json")


def _load() -> list[dict[str, Any]]:
    if not DB.exists():
        return [
            {"id": 1, "title": "Printer on fire", "status": "open"},
            {"id": 2, "title": "Renew the TLS certificate", "status": "open"},
        ]
    tickets: list[dict[str, Any]] = json.loads(DB.read_text())
    return tickets


def _save(tickets: list[dict[str, Any]]) -> None:
    DB.write_text(json.dumps(tickets, indent=2))


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_tickets(status: str = "open") -> list[dict[str, Any]]:
    """The tickets in a status (open or closed)."""
    return [t for t in _load() if t["status"] == status]


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def create_ticket(title: str) -> dict[str, Any]:
    """Open a new ticket."""
    tickets = _load()
    number = max((t["id"] for t in tickets), default=0) + 1
    ticket = {"id": number, "title": title, "status": "open"}
    _save([*tickets, ticket])
    return ticket


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def close_ticket(id: int, reason: str) -> dict[str, Any]:
    """Close a ticket for good."""
    tickets = _load()
    for ticket in tickets:
        if ticket["id"] == id:
            ticket.update(status="closed", reason=reason)
            _save(tickets)
            return ticket
    raise ToolError(f"no ticket {id}")


@server.tool()
def page_on_call(message: str) -> str:
    """Page the engineer on call (says nothing about itself: toolq treats it as dangerous)."""
    return f"paged: {message}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    DB = Path(parser.parse_args().db)
    server.run("stdio")
