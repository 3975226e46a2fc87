"""``toolq demo``: a scripted scenario on a stack of its own, removed when it ends.

It runs on an embedded, password-protected Redis unless ``--redis-url`` names another one;
there it works under a key prefix of its own (so no worker already serving that Redis takes
its messages) and deletes every key of that prefix at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import uuid

import typer

from toolq.cli.common import load_registry, print_json
from toolq.cli.stack import Stack, dev_history_url, remove_namespace
from toolq.dispatch.client import Client
from toolq.keys import Keys
from toolq.models import CallStatus, Event
from toolq.redis_target import redacted
from toolq.registry.registry import ToolRegistry
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
    redis_url: str | None = typer.Option(
        None,
        "--redis-url",
        help="Run on this Redis instead of an embedded one (its keys are removed afterwards).",
    ),
) -> None:
    """Dispatch parallel calls, stream events, approve the dangerous one, print messages."""
    registry = load_registry(app)
    if redis_url is None and os.environ.get("TOOLQ_REDIS_URL"):
        typer.echo("note: TOOLQ_REDIS_URL is ignored: the demo runs on a Redis of its own")
    prefix = "toolq" if redis_url is None else f"toolq-demo-{uuid.uuid4().hex[:8]}"
    scratch = tempfile.mkdtemp(prefix="toolq-demo-")
    log_path = os.path.join(scratch, "workers.log")
    env = {
        "TOOLQ_KEY_PREFIX": prefix,
        "TOOLQ_HISTORY_URL": os.environ.get("TOOLQ_HISTORY_URL") or dev_history_url(scratch),
    }
    if not os.environ.get("TOOLQ_DEMO_DIR"):
        env["TOOLQ_DEMO_DIR"] = scratch  # the demo tools' files go with the rest
    typer.echo("starting Redis and workers…")
    stack = Stack.start(app, redis_url, concurrency=2, log_path=log_path, env=env)
    ok = False
    try:
        ok = _scenario(stack, registry, app, prefix)
    finally:
        stack.stop()
        if redis_url is not None:
            removed = remove_namespace(redis_url, Keys(prefix))
            where = redacted(redis_url)
            typer.echo(f"\nremoved the demo's {removed} keys ({prefix}*) from {where}")
        if ok:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            typer.echo(f"worker log kept at {log_path}", err=True)
    if not ok:
        raise typer.Exit(1)


def _scenario(stack: Stack, registry: ToolRegistry, app: str, prefix: str) -> bool:
    """Run the scenario on a started stack; True when every call succeeded."""
    stack.wait_ready()
    where = "embedded redis-server" if stack.embedded else "existing Redis"
    typer.echo(f"redis {redacted(stack.redis_url)} ({where}); workers: safe, moderate, dangerous\n")
    settings = Settings(
        redis_url=stack.redis_url,
        app=app,
        key_prefix=prefix,
        secrets_key=stack.secrets_key,
        approval_signing_key=stack.signing_key,
    )
    with Client(registry, settings) as client:
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
    return all(r.status is CallStatus.SUCCEEDED for r in results)
