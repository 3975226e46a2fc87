"""The registry the framework examples share: a safe ``lookup`` and a dangerous ``delete_user``.

Start workers for it with ``toolq dev --app examples.frameworks_tools:registry`` (from the
repository root), then run ``python -m examples.pydantic_ai_agent``,
``python -m examples.langgraph_agent`` or ``python -m examples.openai_agents_agent`` with the
same ``TOOLQ_REDIS_URL``. Every model is scripted: nothing leaves the machine.
"""

from __future__ import annotations

from toolq import RiskLevel, ToolRegistry

registry = ToolRegistry()


@registry.tool()
def lookup(user: str) -> dict[str, str]:
    """Look a user up."""
    return {"user": user, "plan": "pro"}


@registry.tool(risk=RiskLevel.DANGEROUS)
def delete_user(user: str) -> str:
    """Delete a user's account (parked for approval)."""
    return f"deleted {user}"
