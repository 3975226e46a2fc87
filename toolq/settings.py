"""One ``Settings`` object (environment prefix ``TOOLQ_``), built in entrypoints and passed down."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from toolq.models import RiskLevel


class ApiToken(BaseModel):
    """Who a bearer token stands for and what it may do.

    Roles: ``viewer`` (read), ``submitter`` (dispatch, cancel, undo), ``approver:<risk>``
    (decide calls of that risk, e.g. ``approver:dangerous``), ``admin`` (everything).
    """

    principal: str
    roles: list[str] = Field(default_factory=lambda: ["viewer"])


class Settings(BaseSettings):
    """Configuration for every toolq process; read from ``TOOLQ_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="TOOLQ_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis for the broker, call records, event streams and pub/sub."""
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
    result_ttl: int = Field(7 * 24 * 3600, gt=0)
    """How long records and event streams of finished runs are kept (seconds)."""
    undo_ttl: int = Field(24 * 3600, gt=0)
    """How long undo data is kept (seconds)."""
    stream_maxlen: int = Field(100_000, gt=0)
    """Approximate cap on one run's event stream."""

    max_payload_bytes: int = Field(5 * 1024 * 1024, gt=0)
    """Largest payload ``dispatch`` accepts."""
    max_json_depth: int = Field(64, gt=0)
    """Deepest JSON nesting accepted in a payload or arguments."""
    max_calls_per_dispatch: int = Field(10_000, gt=0)
    """Most tool calls in one dispatch."""

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
    secrets_key: SecretStr | None = None
    """Key that encrypts secret arguments in Redis (``TOOLQ_SECRETS_KEY``: 32 random bytes,
    URL-safe base64, as a Fernet key is); dispatchers and workers hold it."""
