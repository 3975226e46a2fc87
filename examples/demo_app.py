"""The registry behind ``toolq demo``: one tool per risk level, one of them streaming."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

from toolq import RiskLevel, ToolRegistry

registry = ToolRegistry()
WORKSPACE = Path(os.environ.get("TOOLQ_DEMO_DIR", tempfile.gettempdir())) / "toolq-demo"


@registry.tool(idempotent=True, tags=("weather",))
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> dict[str, object]:
    """Current weather for a city (a fixed table, so the demo needs no network).

    Args:
        city: City name, e.g. "Paris".
        unit: Temperature unit.
    """
    celsius = {"paris": 18, "tokyo": 22, "lima": 16}.get(city.lower(), 20)
    temperature = celsius if unit == "celsius" else round(celsius * 9 / 5 + 32)
    return {"city": city, "temperature": temperature, "unit": unit}


@registry.tool(risk=RiskLevel.MODERATE)
async def summarize_notes(topic: str, steps: int = 3) -> AsyncIterator[object]:
    """Summarize notes on a topic, reporting progress as it goes.

    Args:
        topic: What the notes are about.
        steps: How many progress steps to report.
    """
    for step in range(1, steps + 1):
        await asyncio.sleep(0.1)
        yield {"progress": f"{step}/{steps}"}
    yield {"topic": topic, "summary": f"{steps} notes about {topic}, all upbeat."}


@registry.tool(risk=RiskLevel.DANGEROUS)
def archive_logs(older_than_days: int) -> dict[str, object]:
    """Archive (delete) demo log files older than a number of days.

    Args:
        older_than_days: Age threshold in days.
    """
    WORKSPACE.mkdir(parents=True, exist_ok=True)
    marker = WORKSPACE / "archived.txt"
    marker.write_text(f"archived logs older than {older_than_days} days\n")
    return {"archived": True, "older_than_days": older_than_days, "marker": str(marker)}
