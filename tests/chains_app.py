"""Tools for the ToolChain tests (loaded by real worker processes)."""

from __future__ import annotations

import os

from toolq import RiskLevel, ToolContext, ToolRegistry
from toolq.results.connection import redis_client

registry = ToolRegistry()

USERS = {
    "u1": {
        "name": "Ada",
        "addresses": [
            {"kind": "home", "city": "Paris", "zip": "75001"},
            {"kind": "work", "city": "Lyon", "zip": "69001"},
        ],
    }
}
CITIES = {"Paris": (48.86, 2.35), "Lyon": (45.76, 4.84)}


@registry.tool()
def lookup_user(user_id: str) -> dict[str, object]:
    """A user record with nested addresses."""
    return {"user": USERS[user_id]}


@registry.tool(risk=RiskLevel.MODERATE)
def geocode(city: str) -> dict[str, float]:
    """Coordinates of a city."""
    lat, lon = CITIES[city]
    return {"lat": lat, "lon": lon}


@registry.tool()
def make_label(name: str, city: str, lat: float, lon: float) -> str:
    """A shipping label."""
    return f"{name}, {city} ({lat:.2f}, {lon:.2f})"


@registry.tool()
def explode(message: str = "boom") -> str:
    """Always fails."""
    raise RuntimeError(message)


@registry.tool()
def count(items: list[object]) -> dict[str, int]:
    """How many items."""
    return {"count": len(items)}


@registry.tool(risk=RiskLevel.DANGEROUS)
def ship(label: str, ctx: ToolContext) -> dict[str, str]:
    """Ship a parcel (needs approval); records the execution in Redis."""
    redis_client(os.environ.get("TOOLQ_REDIS_URL") or os.environ["TOOLQ_TEST_REDIS_URL"]).rpush(
        "test:shipped", label
    )
    return {"shipped": label}
