"""Tools with a cost, for the tenants and budgets tests."""

from __future__ import annotations

from pydantic import SecretStr

from toolq import RiskLevel, ToolRegistry

registry = ToolRegistry()


@registry.tool(cost=1)
def charged(text: str) -> str:
    """Costs 1."""
    return text


@registry.tool(cost=lambda pages: pages * 0.5)
def printed(pages: int) -> int:
    """Costs half a unit per page."""
    return pages


def _raises(**_: object) -> float:
    raise RuntimeError("price list unavailable")


@registry.tool(cost=_raises)
def unpriced(text: str) -> str:
    """Its cost function raises."""
    return text


@registry.tool(cost=lambda text: "a lot")
def mispriced(text: str) -> str:
    """Its cost function returns no number."""
    return text


@registry.tool(cost=1, risk=RiskLevel.DANGEROUS)
def gated(target: str) -> str:
    """Costs 1 and needs an approval."""
    return target


@registry.tool(cost=1)
def sealed(token: SecretStr) -> str:
    """Costs 1 and takes a secret."""
    return "ok"


@registry.tool()
def free(text: str) -> str:
    """Costs nothing."""
    return text


@registry.tool(concurrency=2, rate_limit="10/s", cost=2)
def limited(text: str) -> str:
    """Has every per-tool limit."""
    return text
