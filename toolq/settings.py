"""One ``Settings`` object (environment prefix ``TOOLQ_``), built in entrypoints and passed down."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from toolq.errors import ConfigurationError
from toolq.models import EventType, RiskLevel
from toolq.quotas import ANY_TENANT, OTHER_TENANTS, TenantConfig, valid_tenant
from toolq.upstreams import McpServer


class ApiToken(BaseModel):
    """Who a bearer token stands for and what it may do.

    Roles: ``viewer`` (read), ``submitter`` (dispatch, cancel, undo), ``approver:<risk>``
    (decide calls of that risk, e.g. ``approver:dangerous``), ``admin`` (everything).
    """

    principal: str
    roles: list[str] = Field(default_factory=lambda: ["viewer"])
    tenant: str | None = None
    """The tenant whose runs the token sees and dispatches to; a request cannot name
    another. ``None``: the token is not bound to a tenant (its requests may name one)."""

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str | None) -> str | None:
        return valid_tenant(value) if value is not None else None


WEBHOOK_DEFAULT_EVENTS = (
    EventType.AWAITING_APPROVAL,
    EventType.APPROVED,
    EventType.DENIED,
    EventType.EXPIRED,
    EventType.FAILED,
)

LONGEST_BLOCK_SECONDS = 2.0
"""Longest ``BLOCK`` of the blocking reads toolq sends (``XREAD``, ``XREADGROUP``): the socket
timeout (``redis_socket_timeout``) stays at least a second above it, so a read Redis ends
when its block runs out is never cut by the client's timeout."""

UNNOTIFIED_EVENTS = frozenset({EventType.PREVIEWED, EventType.UNDONE, EventType.UNDO_FAILED})
"""Events written outside the state-change scripts, which alone feed the webhook outbox."""


class Webhook(BaseModel):
    """One endpoint of ``TOOLQ_WEBHOOKS``: where to POST which events, and how to sign them.

    ``format``: ``json`` (toolq's payload, signed with ``secret``) or ``slack`` (``{"text"}``,
    for Slack-compatible incoming webhooks, whose URL is itself the secret).
    """

    url: str
    events: list[EventType] = Field(default_factory=lambda: list(WEBHOOK_DEFAULT_EVENTS))
    secret: SecretStr | None = None
    format: Literal["json", "slack"] = "json"

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"webhook url must be http(s)://...: {url!r}")
        return url

    @field_validator("events")
    @classmethod
    def _notifiable(cls, events: list[EventType]) -> list[EventType]:
        silent = [e.value for e in events if e in UNNOTIFIED_EVENTS]
        if silent:
            raise ValueError(f"events {silent} are not sent to webhooks")
        return events

    @model_validator(mode="after")
    def _signed(self) -> Webhook:
        if self.format == "json" and not (self.secret and self.secret.get_secret_value()):
            raise ValueError(f"webhook {self.url!r} needs a secret to sign its deliveries")
        return self

    @property
    def id(self) -> str:
        """Stable name of the endpoint in Redis (its URL's hash: the URL may hold a token)."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:16]


class SlackRoute(BaseModel):
    """Where the Slack approval messages of some calls go, and when they are chased.

    A call takes the first route of ``TOOLQ_SLACK_ROUTES`` whose ``risks`` hold its risk and
    whose ``tenants`` (``None``: any) hold its tenant; a call no route takes posts nothing.
    """

    channel: str = Field(min_length=1)
    """Channel id (``C0123...``) the approval message is posted to."""
    risks: list[RiskLevel] = Field(default_factory=lambda: list(RiskLevel))
    """Risk levels (the tool's, in the registry) whose calls the route takes; default: all."""
    tenants: list[str] | None = None
    """Tenants whose calls the route takes; ``None``: every tenant."""
    remind_before: float | None = Field(None, gt=0)
    """Seconds before the call's deadline to post a reminder in the message's thread."""
    escalate_after: float | None = Field(None, gt=0)
    """Seconds after the call parked, still undecided, to escalate it."""
    escalate_channel: str | None = None
    """Channel the escalation posts the call to (with its buttons); ``None``: the thread."""
    escalate_mention: str | None = None
    """Who the escalation mentions: a user group id (``S0123...``) or a user id (``U0123...``)."""
    digest_seconds: float | None = Field(None, gt=0)
    """Batch this route's calls of one run into one digest message, posted this many seconds
    after the first, with an "approve all in this run" button (for low-risk routes)."""

    @field_validator("escalate_mention")
    @classmethod
    def _mention(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[SUW][A-Z0-9]{2,}", value):
            raise ValueError(f"escalate_mention must be a Slack user group or user id: {value!r}")
        return value

    def takes(self, risk: RiskLevel, tenant: str) -> bool:
        """True when calls of ``risk`` in ``tenant`` go to this route."""
        return risk in self.risks and (self.tenants is None or tenant in self.tenants)


def sentinel_addresses(value: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` as pairs (``[::1]:26379`` for IPv6).

    A ``ValueError`` names the entry that is not one.
    """
    pairs: list[tuple[str, int]] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"sentinel {item!r} is not host:port")
        pairs.append((host.strip("[]"), int(port)))
    return pairs


class SentinelCell(BaseModel):
    """A cell of ``TOOLQ_SHARDS`` found through Redis Sentinel: its Sentinels and service name.

    The master's password and database come from ``TOOLQ_REDIS_URL``, as for ``TOOLQ_SENTINELS``.
    ``draining``: no new run goes to the cell; its runs are still found (docs:
    operations/cells.md).
    """

    sentinels: list[str] = Field(min_length=1)
    master: str = Field(min_length=1)
    draining: bool = False

    @field_validator("sentinels")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        for item in value:
            if len(sentinel_addresses(item)) != 1:
                raise ValueError(f"sentinel {item!r} is not host:port")
        return value


class UrlCell(BaseModel):
    """A cell of ``TOOLQ_SHARDS`` given by its URL, in the form that can say ``draining``."""

    url: str
    draining: bool = False


Cell = str | UrlCell | SentinelCell
"""One entry of ``TOOLQ_SHARDS``: a Redis URL (or ``{"url", "draining"}``), or a Sentinel master."""


class Settings(BaseSettings):
    """Configuration for every toolq process; read from ``TOOLQ_*`` environment variables."""

    # Each field's docstring is its description: docs/reference/settings.md is generated
    # from them (scripts/gen_reference.py), and a test fails on a field without one.
    model_config = SettingsConfigDict(
        env_prefix="TOOLQ_", extra="ignore", use_attribute_docstrings=True
    )

    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis for the broker, call records and event streams. With ``sentinels`` it
    gives only the password, username, database and TLS (its host and port are ignored)."""
    sentinels: str | None = None
    """Redis Sentinels (``TOOLQ_SENTINELS``, ``host:port,host:port``): every process asks
    them for the current master of ``sentinel_master`` and follows it through failovers."""
    sentinel_master: str | None = None
    """Service name the Sentinels monitor (``TOOLQ_SENTINEL_MASTER``)."""
    sentinel_password: SecretStr | None = None
    """Password of the Sentinels themselves, when they have ``requirepass`` (the master's
    comes from ``redis_url``)."""
    min_replicas_ack: int = Field(0, ge=0)
    """Replicas that must confirm (``WAIT``) each write that accepts, decides, starts or
    finishes a call before it is acknowledged; 0 acknowledges on the master's word alone."""
    replica_ack_timeout_ms: int = Field(1000, gt=0)
    """How long one such write waits for its replicas before it is reported as failed."""
    redis_socket_timeout: float = Field(5.0, ge=LONGEST_BLOCK_SECONDS + 1, allow_inf_nan=False)
    """Seconds toolq waits for Redis to answer a command (or accept a connection) before it
    counts the connection as lost, as after a restart: the command is retried on a new
    connection for about 17 s and then fails, as when Redis is down. A Redis that hangs
    (stopped, a paused VM, a network path dropped after a failover) thus fails a command
    within about 17 s plus twice this, instead of blocking it. The Celery broker connections
    use it too. At least 3 (toolq's blocking reads wait up to 2 s for news), and with
    ``min_replicas_ack`` a second above ``replica_ack_timeout_ms``."""
    client_max_connections: int = Field(16, ge=2)
    """Redis connections a ``Client`` (and the API's) opens at most for its commands; a
    thread finding them all busy waits for one (up to 30 s). Every thread waiting for
    results shares one of them, so any number of waiting threads fits."""
    shards: list[Cell] = Field(default_factory=list)
    """Independent Redis cells runs are spread over (``TOOLQ_SHARDS``, JSON list: each a
    Redis URL or ``{"sentinels": ["host:port", ...], "master": "name"}``; ``{"url": ...,
    "draining": true}`` takes no new runs). Empty: one cell, the Redis of ``redis_url`` /
    ``sentinels``. A run lives in one cell (docs: operations/cells.md)."""
    shard: int | None = Field(None, ge=0)
    """The cell a worker consumes and sweeps (``TOOLQ_SHARD``, ``toolq worker --shard``)."""
    app: str | None = None
    """``module:registry`` reference of the tool registry to serve."""
    key_prefix: str = "toolq"
    """Prefix of every Redis key, channel and queue toolq uses."""

    lease_seconds: float = Field(30.0, gt=0)
    """Execution lease; a dead worker's call is recovered about this long after it died."""
    default_timeout: float | None = Field(None, gt=0)
    """Time limit for tools that declare none (seconds); ``None`` means no limit."""
    max_time_limit: float = Field(3600.0, gt=0)
    """Longest per-tool time limit; the broker's visibility timeout is set above it."""
    retry_backoff: float = Field(0.5, ge=0)
    """First retry delay in seconds; doubles each attempt."""
    retry_backoff_max: float = Field(30.0, ge=0)
    """Ceiling of the retry delay."""

    approval_timeout: float = Field(3600.0, gt=0)
    """Default approval deadline in seconds."""
    approvers: dict[str, list[RiskLevel]] | None = None
    """Who may approve which risk levels (``TOOLQ_APPROVERS`` as JSON); ``None``: anyone."""
    dangerous_approvals: int = Field(1, ge=1, le=5)
    """Distinct approvers a DANGEROUS call needs."""
    audit_maxlen: int = Field(1_000_000, gt=0)
    """Approximate cap on the audit stream."""
    audit_anchor_interval: float = Field(60.0, ge=0)
    """Seconds between the signed anchors of the audit chain's head that an API process
    holding ``TOOLQ_APPROVAL_SIGNING_KEY`` appends when entries were added (0: none)."""
    result_ttl: int = Field(7 * 24 * 3600, gt=0)
    """How long records and event streams of finished runs are kept (seconds)."""
    history_url: str = ""
    """SQLAlchemy URL of the history store (``postgresql+psycopg://...`` or ``sqlite:///path``).

    Empty: no history; finished calls stay in Redis for ``result_ttl``. Set: every finished
    call, its events, its decision and the audit stream are archived there, and the call's
    Redis keys then expire after ``hot_seconds``.
    """
    hot_seconds: int = Field(900, gt=0)
    """With a history store: how long an archived call stays in Redis (seconds)."""
    history_batch: int = Field(200, gt=0, le=10_000)
    """Finished calls the archiver writes to the history store in one transaction."""
    history_claim_after: float = Field(30.0, gt=0)
    """Seconds a batch taken by an archiver may stay unwritten before another archiver takes
    it over (the first one died mid-batch)."""
    history_lag_alert: float = Field(300.0, gt=0)
    """``/healthz`` reports degraded when the oldest unarchived final call is older (seconds)."""
    history_retention: dict[str, int] = Field(default_factory=dict)
    """Days each kind of history is kept: keys ``results``, ``events``, ``audit``; absent: forever.

    ``TOOLQ_HISTORY_RETENTION='{"results": 90, "events": 30}'``.
    """
    history_tenant_retention: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Per-tenant overrides of ``history_retention`` (results, events), by tenant."""
    undo_ttl: int = Field(24 * 3600, gt=0)
    """How long undo data is kept (seconds)."""
    undo_approval_seconds: float = Field(3600.0, gt=0)
    """How long a person's approval of an undo stays good (seconds, by its signed time, to
    when a worker starts the undo): a worker refuses an older one (an undo that waited in
    its queue longer fails: ask again), and an older approval of a quorum no longer counts
    (asking again renews it). It bounds how long a Redis writer can replay an approval
    (say after a failed undo)."""
    rule_seconds: float = Field(24 * 3600.0, gt=60)
    """How long a person's rule that loosens a run's gate (a sticky "always approve", mode
    ``auto``) lets the run's calls through (seconds, by its signed time): a worker refuses
    it for a call it starts later, and the dispatcher stops applying it a little before
    (``RULE_MARGIN``), so new calls park again; approving with "always" again renews it.
    It bounds how long one sticky approval lets calls into the run, a Redis writer's
    among them."""
    stream_maxlen: int = Field(100_000, gt=0)
    """Approximate cap on one run's event stream."""

    max_payload_bytes: int = Field(5 * 1024 * 1024, gt=0)
    """Largest payload ``dispatch`` accepts."""
    max_json_depth: int = Field(64, gt=0)
    """Deepest JSON nesting accepted in a payload or arguments."""
    max_calls_per_dispatch: int = Field(10_000, gt=0)
    """Most tool calls in one dispatch."""
    calls_per_message: int = Field(16, ge=1, le=256)
    """Most queued calls of one risk (and time limit) one broker message carries when a
    dispatch holds several; 1 sends one message per call. A worker runs a message's calls
    as its slots free, each under its own lease, and gives back to the queue those it cannot
    start soon (docs: operations/sizing.md)."""
    dispatch_linger: float = Field(0.005, ge=0, le=1)
    """Most seconds a client's dispatch waits for the dispatches of its other conversations
    (threads waiting for their calls) to share one round trip and one worker message; at
    most a quarter of a typical wait, and only when dispatches arrive sooner than that (0:
    never; docs: operations/sizing.md)."""
    async_concurrency: int = Field(100, ge=1)
    """Most ``async def`` calls one worker runs at once on its event loops (``toolq worker
    --async-concurrency``); a prefork worker shares it out between its processes, at least
    one each. Synchronous calls are bounded by ``--concurrency`` (docs: operations/sizing.md)."""

    max_string_bytes: int = Field(1024 * 1024, gt=0)
    """Longest string accepted anywhere in an HTTP request body."""
    api_tokens: dict[str, ApiToken] | None = None
    """Bearer tokens of the HTTP API (``TOOLQ_API_TOKENS``, JSON: token → principal, roles)."""
    api_tokens_file: Path | None = None
    """A JSON file of the same form, read at start-up."""

    sweep_interval: float = Field(1.0, gt=0)
    """How often workers look for expired approvals, lost calls and unenqueued approvals."""
    heartbeat_seconds: float = Field(5.0, gt=0)
    """How often a worker announces itself."""
    redeliver_after: float = Field(10.0, gt=0)
    """Seconds a call's message may sit taken by a worker but not started before the sweeper
    sends it again (the worker died holding it). A copy of a message a live worker still
    holds is harmless: only one delivery of a call ever starts it."""

    approval_signing_key: SecretStr | None = None
    """Ed25519 private key that signs decisions, rules and audit entries (PEM, or URL-safe
    base64 of the raw 32 bytes); held only by deciding processes: API, CLI, approvers."""
    approval_verify_keys: str | None = None
    """Ed25519 public keys (comma-separated, PEM or base64) workers verify approvals with;
    several during a rotation. Without them a worker runs gated calls unverified."""
    secrets_key: SecretStr | None = None
    """Key that encrypts secret arguments in Redis (``TOOLQ_SECRETS_KEY``: 32 random bytes,
    URL-safe base64, as a Fernet key is); dispatchers and workers hold it."""
    max_event_streams: int = Field(1000, gt=0)
    """Open event streams one API process serves; past it, 503 with ``Retry-After``."""
    event_ticket_seconds: float = Field(60.0, gt=0)
    """How long an event-stream ticket (``POST /v1/runs/{run_id}/events/ticket``) is valid."""
    decision_token_seconds: float = Field(900.0, gt=0, le=86400)
    """How long a decision token (``POST /v1/approvals/{call_id}/decision-token``) is valid."""
    max_reason_bytes: int = Field(4096, gt=0, le=65536)
    """Longest deny reason or approval note accepted by the HTTP API (at most 64 KiB: a
    resolution's note is signed, and a signed object stays far below the 256 KiB a
    verifier reads, ``toolq.signing.SIGNED_MAX_BYTES``)."""

    tenants: dict[str, TenantConfig] = Field(default_factory=dict)
    """Per-tenant weight, concurrency, rate limit and budget (``TOOLQ_TENANTS``, JSON:
    tenant → ``{"weight", "concurrency", "rate_limit", "budget"}``; ``"*"`` configures every
    tenant not named)."""

    fair_share: bool | None = None
    """Serve each risk queue's tenants by weight through the admission stage (docs:
    guide/fair-share.md). ``None``: on when ``TOOLQ_TENANTS`` names any tenant. Calls of
    tools or tenants with a concurrency cap or rate limit go through admission either way.
    Give every process (clients, API, workers) the same value and the same tenants."""
    admission_depth: int = Field(2, gt=0)
    """Most admitted messages waiting in one risk's Celery queue: admission keeps about this
    many ahead of the workers (fewer can leave workers idle between messages, more makes a
    newcomer wait behind more calls: docs/benchmarks, "Fair share's cost"); the rest wait in
    backlogs."""
    admission_batch: int = Field(16, ge=1, le=256)
    """Most scheduled calls (of one dispatch, risk and time limit, without limits) one
    message carries: admission lets a message through at a time, so larger batches cost
    other tenants' calls more wait; ``calls_per_message`` still bounds it."""
    admission_hold: float = Field(120.0, gt=0)
    """Seconds an admitted call that has not started yet keeps its concurrency slot (and
    counts against its rate limit) before its hold lapses; START renews it to the lease."""
    admission_window: int = Field(16, gt=0)
    """How many calls from the head of a tenant's backlog admission looks at for one it may
    admit (others ahead of it being throttled by their tool's limits)."""

    webhooks: list[Webhook] = Field(default_factory=list)
    """Endpoints notified of call events (``TOOLQ_WEBHOOKS``, JSON list of ``{"url", "events",
    "secret", "format"}``); workers deliver them. Give every worker the same list."""
    public_url: str | None = None
    """Where the dashboard is reachable (``TOOLQ_PUBLIC_URL``): notifications link to calls."""
    webhook_timeout: float = Field(5.0, gt=0)
    """Seconds one delivery attempt may take."""
    webhook_max_attempts: int = Field(10, ge=1)
    """Attempts before a delivery is given up (and kept in the dead-letter list)."""
    webhook_backoff: float = Field(2.0, gt=0)
    """Delay before the second attempt in seconds; doubles each attempt, with jitter."""
    webhook_backoff_max: float = Field(600.0, gt=0)
    """Ceiling of the delay between attempts."""
    webhook_hold_seconds: int = Field(24 * 3600, gt=0)
    """How long events keep entering the outbox after the last worker with webhooks was seen."""

    mcp_servers: list[McpServer] = Field(default_factory=list)
    """Upstream MCP servers whose tools the CLI's processes offer beside the ``app``'s
    (``TOOLQ_MCP_SERVERS``, JSON list of ``{"name", "command" | "url", "headers",
    "tenant_headers", "env", "tools", "manifest", "sandbox", ...}``; docs:
    guide/mcp-gateway.md). Give every process the same list."""

    slack_bot_token: SecretStr | None = None
    """Bot token (``xoxb-...``) of the toolq Slack app: workers post and update approval
    messages with it, the API answers button presses (docs: guide/slack.md)."""
    slack_signing_secret: SecretStr | None = None
    """Signing secret of the Slack app: the API accepts an interaction
    (``POST /v1/slack/interactions``) only with Slack's signature, made in the last 5 minutes."""
    slack_api_url: str = "https://slack.com/api/"
    """Base URL of Slack's Web API (another one only for a test double)."""
    slack_routes: list[SlackRoute] = Field(default_factory=list)
    """Where approval messages go per risk and tenant, reminders, escalation and digests
    (``TOOLQ_SLACK_ROUTES``, JSON list of ``{"channel", "risks", "tenants", "remind_before",
    "escalate_after", "escalate_channel", "escalate_mention", "digest_seconds"}``)."""
    slack_users: dict[str, ApiToken] = Field(default_factory=dict)
    """Slack user id → the toolq principal a button press is made as, its roles and tenant
    (``TOOLQ_SLACK_USERS``, JSON, as ``TOOLQ_API_TOKENS``); an unmapped user decides nothing."""
    slack_team: str | None = None
    """Workspace id (``T0123...``) interactions must come from; ``None``: any the app is in."""

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, tenants: dict[str, TenantConfig]) -> dict[str, TenantConfig]:
        for name in tenants:
            if name == OTHER_TENANTS:
                raise ValueError(
                    f"tenant {OTHER_TENANTS!r} cannot be configured: /metrics counts every "
                    "tenant not named under that label"
                )
            if name != ANY_TENANT:
                valid_tenant(name)
        return tenants

    @field_validator("sentinels")
    @classmethod
    def _sentinels(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            if not sentinel_addresses(value):
                raise ValueError("TOOLQ_SENTINELS names no sentinel")
            return value
        return None

    @model_validator(mode="after")
    def _sentinel_master(self) -> Settings:
        if self.sentinels and not self.sentinel_master:
            raise ValueError("TOOLQ_SENTINELS needs TOOLQ_SENTINEL_MASTER (the service name)")
        return self

    @model_validator(mode="after")
    def _socket_timeout_above_waits(self) -> Settings:
        # A WAIT for replicas blocks its connection up to its own timeout: a socket timeout
        # below it would cut every slow one, and the write would be retried as if Redis hung.
        wait = self.replica_ack_timeout_ms / 1000
        if self.min_replicas_ack and self.redis_socket_timeout < wait + 1:
            raise ValueError(
                f"TOOLQ_REDIS_SOCKET_TIMEOUT ({self.redis_socket_timeout:g} s) must be at least "
                f"a second above TOOLQ_REPLICA_ACK_TIMEOUT_MS ({wait:g} s)"
            )
        return self

    @field_validator("shards")
    @classmethod
    def _cell_urls(cls, cells: list[Cell]) -> list[Cell]:
        for cell in cells:
            url = cell if isinstance(cell, str) else cell.url if isinstance(cell, UrlCell) else None
            if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError(f"cell {url!r} is not a redis://, rediss:// or unix:// URL")
        if cells and all(not isinstance(c, str) and c.draining for c in cells):
            raise ValueError("every cell of TOOLQ_SHARDS is draining: new runs have none to go to")
        return cells

    @model_validator(mode="after")
    def _shard_listed(self) -> Settings:
        if self.shard is not None and self.shards and not self._listed(self.shard):
            raise ValueError(
                f"TOOLQ_SHARD={self.shard}: TOOLQ_SHARDS lists {len(self.shards)} cells"
            )
        return self

    def _listed(self, index: int) -> bool:
        """Whether cell ``index`` is one of ``shards``: the one range check of a cell index."""
        return 0 <= index < len(self.shards)

    @property
    def fair_share_on(self) -> bool:
        """Whether every runnable call goes through admission (``fair_share``, else tenants)."""
        return bool(self.tenants) if self.fair_share is None else self.fair_share

    def draining(self, index: int) -> bool:
        """True when cell ``index`` of ``shards`` takes no new runs."""
        cell = self.shards[index]
        return not isinstance(cell, str) and cell.draining

    def for_cell(self, index: int) -> Settings:
        """These settings with the Redis of cell ``index`` of ``shards``, as one cell alone.

        A URL cell replaces ``redis_url`` (and drops ``sentinels``); a Sentinel cell sets
        ``sentinels`` and ``sentinel_master`` and keeps ``redis_url`` for its credentials.
        """
        if not self._listed(index):
            raise ValueError(f"cell {index}: TOOLQ_SHARDS lists {len(self.shards)} cells")
        cell = self.shards[index]
        update: dict[str, object] = {"shards": [], "shard": index}
        if isinstance(cell, str | UrlCell):
            url = cell if isinstance(cell, str) else cell.url
            update.update(redis_url=url, sentinels=None, sentinel_master=None)
        else:
            update.update(sentinels=",".join(cell.sentinels), sentinel_master=cell.master)
        return self.model_copy(update=update)

    def for_shard(self, shard: int | None) -> Settings:
        """The settings of the one cell a worker (or ``toolq check``) serves: ``--shard``.

        Without ``shards``: these settings, and ``shard`` must be ``None``. With them: cell
        ``shard``'s (``for_cell``), and ``shard`` must name one. Else ``ConfigurationError``.
        """
        if not self.shards:
            if shard is not None:
                raise ConfigurationError("--shard (TOOLQ_SHARD) needs TOOLQ_SHARDS")
            return self
        if shard is None:
            raise ConfigurationError(
                f"TOOLQ_SHARDS lists {len(self.shards)} cells: name the one to serve "
                "with --shard N (TOOLQ_SHARD)"
            )
        if not self._listed(shard):
            cells = len(self.shards)
            raise ConfigurationError(
                f"--shard {shard}: TOOLQ_SHARDS lists {cells} cells (0 to {cells - 1})"
            )
        return self.for_cell(shard)
