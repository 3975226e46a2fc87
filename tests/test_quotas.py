import pytest
from pydantic import ValidationError

from toolq import Settings, ToolRegistry
from toolq.errors import ConfigurationError
from toolq.quotas import RateLimit, TenantConfig, tenant_config


@pytest.mark.parametrize(
    ("text", "count", "seconds"),
    [("10/s", 10, 1.0), ("100/m", 100, 60.0), ("5/10s", 5, 10.0), (" 3 / h ", 3, 3600.0)],
)
def test_rate_limits_parse(text: str, count: int, seconds: float) -> None:
    assert RateLimit.parse(text) == RateLimit(count=count, seconds=seconds)


@pytest.mark.parametrize("text", ["", "10", "10/x", "0/s", "-1/s", "ten/s", "1/0s"])
def test_bad_rate_limits_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        RateLimit.parse(text)


def test_tenants_setting_reads_json_with_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "TOOLQ_TENANTS",
        '{"acme": {"weight": 3, "concurrency": 4, "rate_limit": "100/m",'
        ' "budget": {"limit": 1000, "per": "day"}}, "*": {"concurrency": 2}}',
    )
    tenants = Settings().tenants
    acme = tenant_config(tenants, "acme")
    assert (acme.weight, acme.concurrency, acme.rate_limit) == (3, 4, RateLimit.parse("100/m"))
    assert acme.budget is not None and acme.budget.limit == 1000
    assert tenant_config(tenants, "other").concurrency == 2
    assert tenant_config({}, "other") == TenantConfig()


@pytest.mark.parametrize(
    "value",
    [
        '{"bad name": {}}',
        '{"acme": {"weight": 0}}',
        '{"acme": {"rate_limit": "x"}}',
        '{"acme": {"budget": {"limit": 1, "per": "week"}}}',
        '{"acme": {"surprise": 1}}',
    ],
)
def test_bad_tenants_settings_are_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TOOLQ_TENANTS", value)
    with pytest.raises(ValidationError):
        Settings()


def test_tool_limits_are_checked_when_registered() -> None:
    registry = ToolRegistry()

    @registry.tool(concurrency=2, rate_limit="10/s", cost=lambda amount: amount / 100)
    def refund(amount: int) -> int:
        return amount

    assert refund.rate_limit == RateLimit(count=10, seconds=1)
    for options in ({"concurrency": 0}, {"rate_limit": "fast"}, {"cost": -1}, {"cost": "1"}):
        with pytest.raises(ConfigurationError):
            registry.tool(name=f"t{len(registry.list())}", **options)(lambda: None)
