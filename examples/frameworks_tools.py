"""What the framework examples share: a safe ``lookup``, a dangerous ``delete_user``, a person.

Start the stack with ``toolq dev --app examples.frameworks_tools:registry`` (from the
repository root): it prints the Redis URL, the secrets key, the API's URL and an ``approver``
token. Then, in another shell, run ``python -m examples.pydantic_ai_agent``,
``python -m examples.langgraph_agent`` or ``python -m examples.openai_agents_agent`` with

    export TOOLQ_REDIS_URL=...  TOOLQ_SECRETS_KEY=...     # the agent: Redis only
    export TOOLQ_API_URL=http://127.0.0.1:8000  TOOLQ_APPROVER_TOKEN=<the approver token>

and without ``TOOLQ_APPROVAL_SIGNING_KEY`` (``toolq dev`` prints it for the CLI; an agent
process that holds it is refused). Every model is scripted: nothing leaves the machine.

The agent never decides: its adapter only surfaces the parked call and, on resume, reads
the decision the person made over HTTP with their own token (``person()``).
"""

from __future__ import annotations

import os

from toolq import ApprovalClient, RiskLevel, ToolRegistry

registry = ToolRegistry()


@registry.tool()
def lookup(user: str) -> dict[str, str]:
    """Look a user up."""
    return {"user": user, "plan": "pro"}


@registry.tool(risk=RiskLevel.DANGEROUS)
def delete_user(user: str) -> str:
    """Delete a user's account (parked for approval)."""
    return f"deleted {user}"


def person() -> ApprovalClient:
    """The approver, who is not the agent: the HTTP API with their own token."""
    url = os.environ.get("TOOLQ_API_URL", "http://127.0.0.1:8000")
    token = os.environ.get("TOOLQ_APPROVER_TOKEN")
    if not token:
        raise SystemExit("set TOOLQ_APPROVER_TOKEN to the approver token `toolq dev` printed")
    return ApprovalClient(url, token)
