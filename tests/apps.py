"""Tool registry of the end-to-end tests (worker processes and in-process test workers)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator

import redis
from pydantic import BaseModel, SecretStr

from toolq import RiskLevel, ToolContext, ToolOutput, ToolRegistry
from toolq.results.connection import redis_client

registry = ToolRegistry()


def _redis() -> redis.Redis:
    """A client that rides out a Redis restart as toolq's own do (redis-py's own client
    does not retry: a handler's write across a restart would fail its call)."""
    return redis_client(os.environ.get("TOOLQ_REDIS_URL") or os.environ["TOOLQ_TEST_REDIS_URL"])


def record(ctx: ToolContext, tag: str = "") -> int:
    """Count an execution of this call in Redis (the tests' ground truth)."""
    client = _redis()
    client.rpush(f"test:exec:{ctx.call_id}", f"{os.getpid()}:{tag}")
    return int(client.llen(f"test:exec:{ctx.call_id}"))


@registry.tool()
def echo(text: str) -> dict[str, str]:
    """Echo the text back."""
    return {"text": text}


@registry.tool()
def noop() -> None:
    """Do nothing."""


@registry.tool(risk=RiskLevel.MODERATE)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@registry.tool(risk=RiskLevel.DANGEROUS)
def wipe(target: str, ctx: ToolContext) -> str:
    """Pretend to wipe a target (records the execution)."""
    record(ctx, "wipe")
    return f"wiped {target}"


@registry.tool()
def slow(seconds: float, ctx: ToolContext) -> str:
    """Sleep (cooperatively cancellable), recording the execution."""
    record(ctx, "slow")
    if ctx.wait_cancelled(seconds):
        return "interrupted"
    return "slept"


@registry.tool()
def stall_first(seconds: float, ctx: ToolContext) -> str:
    """Like slow on its first execution; a re-run returns at once (recording every one)."""
    if record(ctx, "stall_first") == 1 and ctx.wait_cancelled(seconds):
        return "interrupted"
    return "slept"


@registry.tool(idempotent=True)
def slow_idempotent(seconds: float, ctx: ToolContext) -> str:
    """Like slow, but safe to run twice."""
    record(ctx, "slow_idempotent")
    if ctx.wait_cancelled(seconds):
        return "interrupted"
    return "slept"


@registry.tool(idempotent=True)
def record_twice(flag: str, ctx: ToolContext) -> str:
    """Record its start, wait until the file ``flag`` exists, then record again."""
    record(ctx, "record_twice")
    while not os.path.exists(flag):
        if ctx.wait_cancelled(0.05):
            return "interrupted"
    record(ctx, "record_twice")
    return "recorded"


@registry.tool(idempotent=True)
def gated(path: str, seconds: float, ctx: ToolContext) -> str:
    """Return once the file at ``path`` exists (the test's go), first creating
    ``path.<call_id>`` to say so: "opened", or "timed out" after ``seconds``. Records
    every execution; safe to run twice (a re-run finds the go there)."""
    record(ctx, "gated")
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline or ctx.wait_cancelled(0.02):
            return "timed out"
    open(f"{path}.{ctx.call_id}", "w").close()
    return "opened"


@registry.tool(timeout=0.5)
async def too_slow(ctx: ToolContext) -> str:
    """Sleeps past its own time limit."""
    await asyncio.sleep(5)
    return "never"


@registry.tool()
async def async_sleeper(seconds: float) -> str:
    """Async sleep; cancellation cancels the coroutine."""
    await asyncio.sleep(seconds)
    return "done"


@registry.tool()
async def rendezvous(key: str, count: int, seconds: float) -> str:
    """Wait until ``count`` calls naming ``key`` have started: "met", or "alone" after
    ``seconds`` (calls run one after another never meet)."""
    client = _redis()
    client.incr(f"test:rendezvous:{key}")
    deadline = time.monotonic() + seconds
    while int(client.get(f"test:rendezvous:{key}") or 0) < count:
        if time.monotonic() > deadline:
            return "alone"
        await asyncio.sleep(0.05)
    return "met"


class Transient(ConnectionError):
    """A failure worth retrying."""


@registry.tool(retries=3, retry_on=(Transient,))
def flaky(failures: int, ctx: ToolContext) -> str:
    """Fails `failures` times with a transient error, then succeeds."""
    count = record(ctx, "flaky")
    if count <= failures:
        raise Transient(f"transient failure {count}")
    return f"ok after {count}"


@registry.tool(retries=1, retry_on=(Transient,))
def through_outage(flag: str, ctx: ToolContext, fail_first: bool = False) -> str:
    """Record its start, wait until the file ``flag`` exists (Redis is down then), and
    write news while it is: a RETRYING event (``fail_first``: its first attempt fails), or
    a progress event. Its second attempt returns at once."""
    if ctx.attempt == 1:
        record(ctx, "through_outage")
        while not os.path.exists(flag):
            if ctx.wait_cancelled(0.05):
                return "interrupted"
        if fail_first:
            raise Transient("fails once while Redis is away")
        ctx.progress({"while": "Redis is away"})
    return f"done on attempt {ctx.attempt}"


@registry.tool()
async def streams_through_outage(flag: str, ctx: ToolContext) -> AsyncIterator[object]:
    """``through_outage``'s progress from an async generator, on the worker's event loop."""
    record(ctx, "through_outage")
    while not os.path.exists(flag):
        await asyncio.sleep(0.05)
    yield {"while": "Redis is away"}
    yield "streamed"


@registry.tool()
async def countdown(n: int) -> AsyncIterator[object]:
    """Streams n progress steps, then a final value."""
    for i in range(n, 0, -1):
        yield {"left": i}
        await asyncio.sleep(0.01)
    yield {"done": True}


@registry.tool()
async def tally(n: int, ctx: ToolContext) -> int:
    """Reports one dict ``n`` times (``ctx.progress``), counting up in it between reports."""
    state = {"count": 0}
    for i in range(n):
        state["count"] = i
        ctx.progress(state)
    return n


@registry.tool()
async def loop_lateness(seconds: float, flag: str) -> float:
    """Sleeps ``seconds`` in 20 ms steps on the worker's event loop, creating ``flag`` once
    started; the longest any step overslept (seconds): how long the loop was held up."""
    open(flag, "w").close()
    loop = asyncio.get_running_loop()
    worst = 0.0
    end = loop.time() + seconds
    while loop.time() < end:
        before = loop.time()
        await asyncio.sleep(0.02)
        worst = max(worst, loop.time() - before - 0.02)
    return worst


@registry.tool()
def hold_until(started: str, go: str) -> str:
    """Creates the file ``started``, then waits (blocking, not cancellable) until ``go`` exists."""
    open(started, "w").close()
    while not os.path.exists(go):
        time.sleep(0.02)
    return "went"


@registry.tool()
def shell_sleep(seconds: int, ctx: ToolContext) -> str:
    """Runs `sleep` in a child process group (killed on cancel)."""
    proc = ctx.popen(["sh", "-c", f"sleep {int(seconds)} & sleep {int(seconds)}; wait"])
    _redis().set(f"test:pgid:{ctx.call_id}", proc.pid)
    proc.wait()
    return f"exit {proc.returncode}"


@registry.tool()
def boom() -> None:
    """Always fails."""
    raise RuntimeError("kaboom")


@registry.tool()
def sleep_then(seconds: float) -> float:
    """Blocking sleep (not cancellable)."""
    time.sleep(seconds)
    return seconds


# -- approvals ------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _preview_edit(path: str, content: str) -> dict[str, object]:
    return {"path": path, "before": _read(path) or "", "after": content}


def _undo_edit(undo_data: dict[str, object]) -> None:
    path = str(undo_data["path"])
    if undo_data["before"] is None:
        os.remove(path)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(str(undo_data["before"]))


@registry.tool(
    risk=RiskLevel.MODERATE,
    requires_approval=True,
    preview=_preview_edit,
    undo=_undo_edit,
    approval_metadata={"warning": "overwrites the file"},
)
def edit_file(path: str, content: str) -> ToolOutput:
    """Replace a file's content (approval shows the diff; undo restores it)."""
    before = _read(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    return ToolOutput.ok({"written": len(content)}, undo_metadata={"path": path, "before": before})


@registry.tool(risk=RiskLevel.MODERATE, requires_approval=lambda args: args["amount"] > 100)
def transfer(amount: int, ctx: ToolContext) -> str:
    """Move money; only large amounts need approval."""
    record(ctx, "transfer")
    return f"moved {amount}"


@registry.tool(risk=RiskLevel.DANGEROUS)
def login(user: str, password: SecretStr, ctx: ToolContext) -> str:
    """Log in (the password is secret)."""
    record(ctx, "login")
    return f"{user} logged in with a {len(password.get_secret_value())}-char password"


def fingerprint(secret: SecretStr) -> str:
    """What secret-taking tools record of a secret: its hash, never the value."""
    return hashlib.sha256(secret.get_secret_value().encode()).hexdigest()[:16]


class Credentials(BaseModel):
    """A nested model holding a secret."""

    user: str
    password: SecretStr


class ApiKey(BaseModel):
    """One item of a list of secrets."""

    name: str
    value: SecretStr


@registry.tool(risk=RiskLevel.MODERATE)
def vault_login(creds: Credentials, ctx: ToolContext) -> str:
    """Log in with nested credentials (never parked: moderate)."""
    record(ctx, f"vault:{fingerprint(creds.password)}")
    return f"{creds.user} logged in"


@registry.tool()
def fetch_with_token(url: str, token: SecretStr, ctx: ToolContext) -> str:
    """A safe tool with a top-level secret (never parked)."""
    record(ctx, f"fetch:{fingerprint(token)}")
    return f"fetched {url}"


@registry.tool(risk=RiskLevel.DANGEROUS)
def rotate_keys(
    service: str, keys: list[ApiKey], headers: dict[str, SecretStr], ctx: ToolContext
) -> str:
    """Rotate keys: secrets in list items and dict values (parked: dangerous)."""
    seen = [f"{k.name}={fingerprint(k.value)}" for k in keys]
    seen += [f"{name}={fingerprint(value)}" for name, value in sorted(headers.items())]
    record(ctx, "rotate:" + ",".join(seen))
    return f"rotated {len(keys)} keys of {service}"


@registry.tool(risk=RiskLevel.DANGEROUS)
def purge(ctx: ToolContext, scope: str = "cache") -> str:
    """Pretend to purge a scope, the cache unless told (records the execution; parked)."""
    record(ctx, f"purge {scope}")
    return f"purged {scope}"


@registry.tool(risk=RiskLevel.DANGEROUS, approval_timeout=1.0)
def hurry(ctx: ToolContext) -> str:
    """A dangerous call whose approval must come within a second."""
    record(ctx, "hurry")
    return "done"


@registry.tool(allowed_behaviors=("doc_edit",))
def publish(doc: str) -> str:
    """Only allowed while editing documents."""
    return f"published {doc}"


@registry.tool(category="beta")
def beta_feature() -> str:
    """A tool in a category that tests switch off."""
    return "beta"


@registry.tool(is_available=lambda: False)
def offline() -> str:
    """Never available."""
    return "unreachable"


@registry.tool()
def picture(caption: str) -> list[object]:
    """Returns content blocks: text and a (tiny) image."""
    from toolq import ImageContent, TextContent

    return [TextContent(text=caption), ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]


def _undo_deploy(undo_data: dict[str, object]) -> None:
    _redis().rpush("test:undo:deploy", str(undo_data["call_id"]))


@registry.tool(risk=RiskLevel.DANGEROUS, undo=_undo_deploy)
def deploy(service: str, replicas: int, ctx: ToolContext) -> ToolOutput:
    """Pretend to deploy (records the execution; its undo records itself in test:undo:deploy)."""
    record(ctx, f"deploy {service} {replicas}")
    return ToolOutput.ok(f"deployed {service} x{replicas}", undo_metadata={"call_id": ctx.call_id})


@registry.tool(risk=RiskLevel.DANGEROUS)
def post_json(url: str, token: SecretStr, body: dict[str, object], ctx: ToolContext) -> str:
    """POST a JSON body with a secret token (parked: dangerous); records the body it got."""
    import json as _json

    _redis().rpush(f"test:body:{ctx.call_id}", _json.dumps(body, sort_keys=True))
    record(ctx, "post_json")
    return f"posted to {url}"
