"""An upstream MCP server for the gateway tests, built on the mcp SDK's low-level ``Server``.

Run as a script (it imports nothing from toolq or the tests, so it also runs in the
sandbox as another user)::

    python server.py --record calls.jsonl                       # stdio
    python server.py --record calls.jsonl --http 8765 --tokens '{"t-acme": "acme"}'

Every ``tools/call`` it receives is appended to the record file as one JSON line, with the
arguments exactly as they arrived, its pid, parent pid and uid, and (over HTTP) the tenant
its bearer token stands for: never the token itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

OBJECT = "object"


def _tool(
    name: str,
    properties: dict[str, Any],
    annotations: dict[str, Any] | None,
    description: str,
    output: dict[str, Any] | None = None,
    optional: dict[str, Any] | None = None,
) -> types.Tool:
    schema = {
        "type": OBJECT,
        "properties": {**properties, **(optional or {})},
        "required": sorted(properties),
    }
    return types.Tool.model_validate(
        {
            "name": name,
            "description": description,
            "inputSchema": schema,
            **({"annotations": annotations} if annotations is not None else {}),
            **({"outputSchema": output} if output is not None else {}),
        }
    )


STRING = {"type": "string"}
TOOLS = [
    _tool("read_note", {"name": STRING}, {"readOnlyHint": True}, "Read a note."),
    _tool(
        "append_note",
        {"name": STRING, "text": STRING},
        {"readOnlyHint": False, "destructiveHint": False},
        "Append text to a note.",
        optional={"newline": {"type": "boolean", "default": False}},
    ),
    _tool("delete_note", {"name": STRING}, {"destructiveHint": True}, "Delete a note."),
    _tool("mystery", {"x": {"type": "integer"}}, None, "Does something it does not say."),
    _tool(
        "count",
        {"steps": {"type": "integer"}, "delay": {"type": "number"}},
        {"readOnlyHint": True},
        "Count up, reporting progress at each step.",
    ),
    _tool(
        "hang",
        {"seconds": {"type": "number"}},
        {"readOnlyHint": False, "destructiveHint": False},
        "Work for a while, changing things.",
    ),
    _tool("fail", {}, {"readOnlyHint": True}, "Always fails."),
    _tool("reject", {}, {"readOnlyHint": True}, "Answers with a JSON-RPC error."),
    _tool(
        "double",
        {"x": {"type": "integer"}},
        {"readOnlyHint": True},
        "Twice x.",
        {"type": OBJECT, "properties": {"double": {"type": "integer"}}, "required": ["double"]},
    ),
    _tool("grow", {}, {"readOnlyHint": False, "destructiveHint": False}, "Add a tool."),
    _tool("whoami", {}, {"readOnlyHint": True}, "The tenant this connection is for."),
    _tool("environ", {}, {"readOnlyHint": True}, "The names of the environment variables."),
]
EXTRA = _tool("extra", {}, {"readOnlyHint": True}, "A tool added while running.")


class Upstream:
    def __init__(self, record: str, tokens: dict[str, str]) -> None:
        self.record_path = record
        self.tokens = tokens
        self.tools = list(TOOLS)
        self.notes: dict[str, str] = {"todo": "buy milk"}
        self.sessions: list[Any] = []
        """Every session that called: ``grow`` tells each of them the list changed."""

    def record(self, entry: dict[str, Any]) -> None:
        line = json.dumps({**entry, "pid": os.getpid(), "ppid": os.getppid(), "uid": os.getuid()})
        with open(self.record_path, "a", encoding="utf-8") as out:
            out.write(line + "\n")

    def tenant(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        headers = getattr(ctx.request, "headers", None)
        if headers is None:
            return None
        token = str(headers.get("authorization", "")).removeprefix("Bearer ")
        return self.tokens.get(token)

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if ctx.session not in self.sessions:
            self.sessions.append(ctx.session)
        return types.ListToolsResult(tools=self.tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        self.record({"tool": name, "arguments": args, "tenant": self.tenant(ctx), "event": "call"})
        text = await self.run(name, args, ctx)
        if isinstance(text, types.CallToolResult):
            return text
        return types.CallToolResult(content=[types.TextContent(text=text)])

    async def run(
        self, name: str, args: dict[str, Any], ctx: ServerRequestContext[Any, Any]
    ) -> str | types.CallToolResult:
        if name == "read_note":
            return self.notes.get(args["name"], "")
        if name == "append_note":
            line = args["text"] + ("\n" if args.get("newline", False) else "")
            self.notes[args["name"]] = self.notes.get(args["name"], "") + line
            return self.notes[args["name"]]
        if name == "delete_note":
            self.notes.pop(args["name"], None)
            return f"deleted {args['name']}"
        if name == "mystery":
            return str(args["x"])
        if name == "count":
            try:
                for step in range(1, args["steps"] + 1):
                    await anyio.sleep(args["delay"])
                    await ctx.session.report_progress(step, args["steps"], f"step {step}")
            except anyio.get_cancelled_exc_class():
                self.record({"tool": name, "event": "cancelled"})
                raise
            return f"counted to {args['steps']}"
        if name == "hang":
            await anyio.sleep(args["seconds"])
            return "done"
        if name == "fail":
            return types.CallToolResult(
                content=[types.TextContent(text="the note is locked")], is_error=True
            )
        if name == "reject":
            raise MCPError(code=-32001, message="not on a Sunday")
        if name == "double":
            value = {"double": args["x"] * 2}
            return types.CallToolResult(
                content=[types.TextContent(text=json.dumps(value))], structured_content=value
            )
        if name == "grow":
            if EXTRA not in self.tools:
                self.tools.append(EXTRA)
            for session in self.sessions:
                with contextlib.suppress(Exception):  # a session that went away
                    await session.send_tool_list_changed()
            return "grown"
        if name == "whoami":
            return self.tenant(ctx) or "nobody"
        if name == "extra":
            return "extra"
        if name == "environ":
            return json.dumps(sorted(os.environ))
        return types.CallToolResult(
            content=[types.TextContent(text=f"no tool {name}")], is_error=True
        )


class RequireToken:
    """Refuses HTTP requests without a known bearer token (401)."""

    def __init__(self, app: Any, tokens: dict[str, str]) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.tokens:
            headers = dict(scope.get("headers") or [])
            token = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")
            if token not in self.tokens:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", required=True)
    parser.add_argument("--http", type=int, default=0, help="Serve Streamable HTTP on this port.")
    parser.add_argument("--tokens", default="{}", help="JSON: bearer token -> tenant.")
    options = parser.parse_args()
    upstream = Upstream(options.record, json.loads(options.tokens))
    server: Server[Any] = Server(
        "notes", version="1.0", on_list_tools=upstream.list_tools, on_call_tool=upstream.call_tool
    )
    if options.http:
        import uvicorn

        app = RequireToken(server.streamable_http_app(host="127.0.0.1"), upstream.tokens)
        uvicorn.run(app, host="127.0.0.1", port=options.http, log_level="warning")
        return

    async def serve() -> None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
