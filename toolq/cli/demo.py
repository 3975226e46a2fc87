"""``toolq demo``: a scripted scenario on a local stack (embedded Redis if none answers)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import uuid

import typer

from toolq.cli.common import REDIS_HELP, load_registry, print_json, settings_for
from toolq.cli.stack import Stack
from toolq.dispatch.client import Client
from toolq.models import CallStatus, Event
from toolq.settings import Settings

DEMO_APP = "examples.demo_app:registry"


def demo_response() -> dict[str, object]:
    """An OpenAI Chat Completion asking for three tools in parallel, one of them dangerous."""

    def call(name: str, arguments: dict[str, object]) -> dict[str, object]:
        return {
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }

    return {
        "id": "chatcmpl-demo",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "gpt-demo",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        call("get_weather", {"city": "Paris"}),
                        call("summarize_notes", {"topic": "release", "steps": 3}),
                        call("archive_logs", {"older_than_days": 30}),
                    ],
                },
            }
        ],
    }


def _show(event: Event) -> None:
    detail = {
        k: v for k, v in event.data.items() if k in ("status", "data", "output", "error", "by")
    }
    typer.echo(f"  {event.id:<17} {event.type.value:<24} {event.call_id[:8]}  {json.dumps(detail)}")


def demo(
    app: str = typer.Option(DEMO_APP, "--app", help="Registry to run the scenario with."),
    redis_url: str | None = typer.Option(None, envvar="TOOLQ_REDIS_URL", help=REDIS_HELP),
) -> None:
    """Dispatch parallel calls, stream events, approve the dangerous one, print messages."""
    settings = settings_for(app, redis_url)
    registry = load_registry(app)
    log_path = os.path.join(tempfile.gettempdir(), "toolq-demo-workers.log")
    typer.echo(f"starting Redis and workers (worker log: {log_path})…")
    stack = Stack.start(app, settings.redis_url, concurrency=2, log_path=log_path)
    try:
        stack.wait_ready()
        where = "embedded redis-server" if stack.embedded else "existing Redis"
        typer.echo(f"redis {stack.redis_url} ({where}); workers: safe, moderate, dangerous\n")
        client = Client(
            registry,
            Settings(
                redis_url=stack.redis_url,
                app=app,
                secrets_key=stack.secrets_key,
                approval_signing_key=stack.signing_key,
            ),
        )
        batch = client.dispatch(demo_response(), principal="demo-agent")
        typer.echo(f"dispatched run {batch.run_id}:")
        for ref in batch.calls:
            typer.echo(f"  {ref.call_id[:8]}  {ref.name:<16} {ref.status.value}")
        typer.echo("\nevents:")
        parked = [r.call_id for r in batch.calls if r.status is CallStatus.AWAITING_APPROVAL]

        def approve_when_others_done() -> None:
            others = [r.call_id for r in batch.calls if r.call_id not in parked]
            client.wait(others, timeout=60, run_id=batch.run_id)
            for call_id in parked:
                client.approvals.approve(call_id, by="demo-approver", note="looks fine")

        approver = threading.Thread(target=approve_when_others_done, daemon=True)
        approver.start()
        for event in batch.events(timeout=60):
            _show(event)
        approver.join(5)
        results = batch.wait(timeout=30)
        typer.echo("\nresults:")
        for result in results:
            typer.echo(f"  {result.name:<16} {result.status.value:<10} {json.dumps(result.output)}")
        typer.echo("\nOpenAI tool messages for the next turn:")
        print_json(batch.to_messages())
        client.close()
        if not all(r.status is CallStatus.SUCCEEDED for r in results):
            raise typer.Exit(1)
    finally:
        stack.stop()
