"""Tenants' limits: ``RateLimit`` ("100/m"), ``Budget``, ``TenantConfig`` (``TOOLQ_TENANTS``).

A tenant is the customer a call is run for (``dispatch(..., tenant="acme")``, or the tenant
an API token names). ``TOOLQ_TENANTS`` maps tenant names to a ``TenantConfig``; the entry
``"*"`` is the configuration of every tenant not named (when absent: weight 1, no limits).
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_TENANT = "default"
"""The tenant of a call dispatched without one."""

ANY_TENANT = "*"
"""The ``TOOLQ_TENANTS`` entry that configures every tenant not named."""

OTHER_TENANTS = "other"
"""The metrics' ``tenant`` label of every tenant not named in ``TOOLQ_TENANTS`` (nor
``default``); it cannot be configured as a tenant of its own."""

TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")
"""What a tenant name may be (the whole name: ``fullmatch``, so no trailing newline): it
appears in Redis keys and metric labels."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")

Period = Literal["minute", "hour", "day", "month"]

LimitKind = Literal["concurrency", "rate_limit"]
"""The limits the admission stage enforces, fleet-wide (``call.throttled`` names one)."""
LimitScope = Literal["tool", "tenant"]
"""What a limit belongs to: a tool (its attributes) or a tenant (``TenantConfig``)."""


def valid_tenant(name: str) -> str:
    """``name`` if it is a valid tenant name, else a ``ValueError`` saying what is allowed."""
    if not isinstance(name, str) or not TENANT_NAME.fullmatch(name):
        raise ValueError(
            f"tenant {name!r} must be 1-64 characters: letters, digits and . _ : @ -"
            " (not starting with a symbol)"
        )
    return name


class RateLimit(BaseModel):
    """At most ``count`` starts per ``seconds``; written ``"10/s"``, ``"100/m"``, ``"5/10s"``."""

    model_config = ConfigDict(frozen=True)

    count: int = Field(gt=0)
    seconds: float = Field(gt=0)

    @classmethod
    def parse(cls, text: str | RateLimit) -> RateLimit:
        """``"N/s"``, ``"N/m"``, ``"N/h"``, ``"N/d"``, or ``"N/Ks"`` (per K seconds)."""
        if isinstance(text, RateLimit):
            return text
        match = _RATE.match(text)
        if not match:
            raise ValueError(f"rate limit {text!r} is not 'N/s', 'N/m', 'N/h', 'N/d' or 'N/10s'")
        count, multiple, unit = match.groups()
        return cls(count=int(count), seconds=int(multiple or 1) * _UNITS[unit])

    def __str__(self) -> str:
        return f"{self.count}/{self.seconds:g}s"


class Budget(BaseModel):
    """A tenant may spend ``limit`` (in tools' ``cost`` units) per calendar ``per`` (UTC)."""

    model_config = ConfigDict(frozen=True)

    limit: float = Field(ge=0, allow_inf_nan=False)
    per: Period = "day"


class TenantConfig(BaseModel):
    """One tenant's share and limits.

    ``weight``: its share of each risk queue's workers against other tenants with calls
    waiting; ``concurrency``: its calls running at once, fleet-wide; ``rate_limit``: starts
    per period, fleet-wide; ``budget``: what its calls may cost per period.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    weight: float = Field(1.0, gt=0, le=1000)
    concurrency: int | None = Field(None, gt=0)
    rate_limit: RateLimit | None = None
    budget: Budget | None = None

    @field_validator("rate_limit", mode="before")
    @classmethod
    def _rate(cls, value: object) -> object:
        return RateLimit.parse(value) if isinstance(value, str) else value


def tenant_config(tenants: dict[str, TenantConfig], tenant: str) -> TenantConfig:
    """The configuration of ``tenant``: its own entry, else ``"*"``, else the defaults."""
    return tenants.get(tenant) or tenants.get(ANY_TENANT) or TenantConfig()


def finite_cost(value: object) -> bool:
    """True for a cost: an int or float (not a bool), finite as a float, and >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        as_float = float(value)  # an int past ~1e308 has no float
    except OverflowError:
        return False
    return math.isfinite(as_float) and as_float >= 0
