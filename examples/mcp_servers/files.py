"""A small files server for the MCP gateway example: an upstream toolq did not write.

Built with the mcp SDK's ``MCPServer``; it serves one directory over stdio and says what each
tool does in its annotations, which is all toolq goes by::

    python examples/mcp_servers/files.py --root /srv/files
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("files", instructions="Files of one directory.")
ROOT = Path(".")


def _path(name: str) -> Path:
    path = (ROOT / name).resolve()
    if path.parent != ROOT.resolve():
        raise ToolError(f"{name!r} is not a file name in the served directory")
    return path


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_files() -> list[str]:
    """The names of the files in the directory."""
    return sorted(p.name for p in ROOT.iterdir() if p.is_file())


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_file(name: str) -> str:
    """The text of one file."""
    return _path(name).read_text()


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def search(word: str, ctx: Context) -> list[str]:
    """The files that contain a word, reporting progress file by file."""
    files = sorted(p for p in ROOT.iterdir() if p.is_file())
    found = []
    for done, path in enumerate(files, 1):
        if word in path.read_text():
            found.append(path.name)
        await ctx.report_progress(done, len(files), f"searched {path.name}")
        await anyio.sleep(0.05)
    return found


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def write_file(name: str, text: str) -> str:
    """Write a file, replacing what it held."""
    _path(name).write_text(text)
    return f"wrote {len(text)} characters to {name}"


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def delete_file(name: str) -> str:
    """Delete a file."""
    _path(name).unlink()
    return f"deleted {name}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    ROOT = Path(parser.parse_args().root)
    server.run("stdio")
