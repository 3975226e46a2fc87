"""Answer 503 ``redis_unavailable`` at once when Redis does not answer.

toolq's Redis clients retry a dropped connection for about 17 seconds, to ride out a
restart. A request that arrives while Redis is down would wait out those retries and end
in a 500; the gate asks Redis first (a PING with a short timeout, no retries) and answers a
JSON 503 at once when Redis refuses the connection, and within ``PING_TIMEOUT`` when it does
not answer at all. The timeout is not shorter because on a loaded host a healthy Redis can
take over half a second to accept a connection, and a false 503 refuses a good request.
A PING that succeeded is trusted for ``FRESH_SECONDS``, so a healthy API pays one PING per
second, not one per request.
"""

from __future__ import annotations

import time

import redis
from starlette.types import ASGIApp, Receive, Scope, Send

from toolq.api.errors import send_error
from toolq.errors import RedisUnavailableError
from toolq.redis_failures import store_error
from toolq.results.connection import RedisTarget, async_probe_client

PING_TIMEOUT = 2.0
FRESH_SECONDS = 1.0
GATED_PREFIXES = ("/v1/", "/metrics")


class RedisProbe:
    """A short-timeout PING of the Redis (or Sentinel master) at ``where``; remembers success."""

    def __init__(self, where: RedisTarget | str) -> None:
        target = RedisTarget.of(where)
        self.where = target.describe()
        self._client = async_probe_client(target, PING_TIMEOUT)
        self._ok_at = 0.0

    async def check(self, fresh: float = FRESH_SECONDS) -> None:
        """Raise ``RedisUnavailableError`` unless Redis answered within ``fresh`` seconds."""
        if time.monotonic() - self._ok_at < fresh:
            return
        try:
            await self._client.ping()
        except (redis.RedisError, OSError) as exc:
            self._ok_at = 0.0
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            message = f"Redis at {self.where} does not answer: {reason}"
            named = store_error(exc, self.where)
            if named is not None and not isinstance(named, RedisUnavailableError):
                # It answers, and refuses (wrong password, ACL): say that, not "no answer".
                message = f"{named.message} [{named.code}]"
            raise RedisUnavailableError(message) from None
        self._ok_at = time.monotonic()

    @property
    def client(self) -> redis.asyncio.Redis:
        """The probe's short-timeout client (``/healthz`` reads its checks with it)."""
        return self._client

    async def close(self) -> None:
        """Close the probe's connection."""
        await self._client.aclose()


class RedisGate:
    """ASGI middleware: ``/v1/*`` and ``/metrics`` answer 503 JSON while Redis is down."""

    def __init__(self, app: ASGIApp, probe: RedisProbe) -> None:
        self.app = app
        self.probe = probe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check Redis before passing a gated request on."""
        if scope["type"] == "http" and scope.get("path", "").startswith(GATED_PREFIXES):
            try:
                await self.probe.check()
            except RedisUnavailableError as exc:
                await send_error(send, 503, exc.code, exc.message, (b"retry-after", b"5"))
                return
        await self.app(scope, receive, send)
