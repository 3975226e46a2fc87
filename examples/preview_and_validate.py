"""Tool classes: a JSON-schema enum, a preview the approver sees first, ``validate_args``.

Ported from roura_agent's custom tools. Run it against a local stack from the repository root,
with the same ``TOOLQ_REDIS_URL`` in both shells::

    toolq dev --app examples.preview_and_validate:registry   # shell 1
    python -m examples.preview_and_validate                  # shell 2

It asks for the timestamp in each enum format (and one format the JSON schema refuses), runs a
MODERATE replace that waits for approval so the approver sees its preview and diff first (this
script approves it itself), and shows ``validate_args`` refusing a bad URL before anything is
queued. The valid fetch targets a throwaway ``http.server`` on 127.0.0.1 that the script starts,
so no internet is needed.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from examples._shared import connect, example_dir, expect, parked, run, show
from toolq import CallStatus, Client, RiskLevel, Tool, ToolOutput, ToolRegistry

registry = ToolRegistry()


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
        """Now, in the asked format."""
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
    requires_approval = True  # so a human sees the preview before the file changes
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
        """Show what would be replaced (``before``/``after`` also give approvers a diff)."""
        try:
            content = Path(path).read_text()
        except FileNotFoundError:
            return {"error": f"File not found: {path}"}
        count = content.count(old)
        return {
            "path": path,
            "occurrences": count,
            "sample": content[:200] if count > 0 else None,
            "before": content,
            "after": content.replace(old, new),
        }

    def execute(self, path: str, old: str, new: str) -> ToolOutput:
        """Replace every occurrence."""
        file = Path(path)
        try:
            content = file.read_text()
        except OSError as exc:
            return ToolOutput.fail(str(exc))
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

    def validate_args(self, url: str, timeout: int = 30) -> tuple[bool, str]:
        """Validate URL and timeout; toolq runs this before a call is queued."""
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https"):
            return False, "URL must use http or https"
        if not parsed.netloc:
            return False, "URL must have a host"
        if timeout < 1 or timeout > 300:
            return False, "Timeout must be between 1 and 300 seconds"
        return True, ""

    def execute(self, url: str, timeout: int = 30) -> ToolOutput:
        """GET the URL (validate_args has already passed)."""
        try:
            response = httpx.get(url, timeout=timeout)
        except httpx.TimeoutException:
            return ToolOutput.fail("Request timed out")
        except httpx.HTTPError as exc:
            return ToolOutput.fail(str(exc))
        return ToolOutput.ok(
            {
                "status": response.status_code,
                "content": response.text[:10000],
                "headers": dict(response.headers),
            }
        )


for tool_class in (TimestampTool, ReplaceTool, FetchTool):
    registry.register(tool_class)


# -- the example -------------------------------------------------------------------------------


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from a local http.server\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the example's output readable


@contextmanager
def local_server() -> Iterator[str]:
    """A throwaway HTTP server on 127.0.0.1; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hello"
    finally:
        server.shutdown()
        server.server_close()


def example(client: Client) -> None:
    """Timestamps, a previewed and approved replace, a refused and a valid fetch."""
    run_id = f"preview-{uuid.uuid4().hex[:8]}"

    calls = [
        {"id": f"ts_{fmt}", "name": "custom.timestamp", "arguments": {"format": fmt}}
        for fmt in ("iso", "unix", "human", "rfc2822")
    ]
    stamps = client.dispatch(calls, run_id=run_id).wait(timeout=60)
    for result in stamps:
        print(f"{result.tool_call_id}: {result.status.value} {result.output or result.error}")
    expect([r.ok for r in stamps] == [True, True, True, False], "timestamps went wrong")
    expect(isinstance(stamps[1].output["timestamp"], int), "unix timestamp is not an int")

    target = example_dir("preview_and_validate") / "notes.txt"
    target.write_text("the cat sat on the mat\nthe cat slept\n")
    replace = client.dispatch(
        [
            {
                "id": "replace_1",
                "name": "custom.replace",
                "arguments": {"path": str(target), "old": "cat", "new": "dog"},
            }
        ],
        run_id=run_id,
    )
    [call_id] = replace.call_ids
    request = parked(client, call_id, preview=True)
    preview = dict(request.preview or {})
    show("preview", {k: preview.get(k) for k in ("path", "occurrences", "sample")})
    print(request.diff["diff_output"] if request.diff else "(no diff)")
    expect(preview.get("occurrences") == 2, "preview did not count two occurrences")
    expect("cat" in target.read_text(), "the file changed before approval")
    client.approvals.approve(call_id, by="example-approver", digest=request.digest)
    [replaced] = replace.wait(timeout=60)
    show("custom.replace", replaced.output)
    expect(replaced.output == {"replaced": 2, "path": str(target)}, "replace did not run")
    expect(target.read_text() == "the dog sat on the mat\nthe dog slept\n", "file not changed")

    refused = client.dispatch(
        [{"id": "fetch_bad", "name": "custom.fetch", "arguments": {"url": "ftp://example.com"}}],
        run_id=run_id,
    )
    expect(refused.calls[0].status is CallStatus.FAILED, "a bad URL was queued")
    [bad] = refused.wait(timeout=60)
    print(f"fetch ftp://example.com: {bad.status.value}: {bad.error}")
    expect("URL must use http or https" in (bad.error or ""), "wrong refusal")

    with local_server() as url:
        [fetched] = client.dispatch(
            [{"id": "fetch_ok", "name": "custom.fetch", "arguments": {"url": url, "timeout": 5}}],
            run_id=run_id,
        ).wait(timeout=60)
    show("fetch local server", {"status": fetched.status.value, "output": fetched.output})
    expect(fetched.ok and fetched.output["status"] == 200, "local fetch failed")


def main(client: Client | None = None) -> int:
    """Run the example against workers serving this registry."""
    with connect(registry, client) as active:
        return run(example, active)


if __name__ == "__main__":
    raise SystemExit(main())
