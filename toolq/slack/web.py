"""``SlackWeb``: the few Slack Web API methods toolq calls, over the official ``slack-sdk``.

``chat.postMessage``, ``chat.update``, ``chat.postEphemeral`` and ``views.open``, with the
bot token of ``TOOLQ_SLACK_BOT_TOKEN`` at ``TOOLQ_SLACK_API_URL``. The SDK retries
nothing here: a failed call raises ``SlackCallError`` and whoever called decides (the
webhook outbox retries deliveries, honouring a 429's ``Retry-After``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from toolq.errors import ConfigurationError
from toolq.settings import Settings

if TYPE_CHECKING:
    from slack_sdk import WebClient


class SlackCallError(Exception):
    """A Slack Web API call that failed: Slack's error code, and its ``Retry-After``."""

    def __init__(self, error: str, retry_after: float | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.retry_after = retry_after


def _retry_after(headers: Any) -> float | None:
    try:
        value = headers.get("Retry-After") or headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


class SlackWeb:
    """Slack's Web API as the bot of the toolq Slack app."""

    def __init__(self, settings: Settings) -> None:
        if settings.slack_bot_token is None:
            raise ConfigurationError("Slack needs TOOLQ_SLACK_BOT_TOKEN (the app's bot token)")
        try:
            from slack_sdk import WebClient
        except ImportError:  # pragma: no cover - depends on the install
            raise ConfigurationError(
                "Slack approvals need the slack-sdk package: pip install 'toolq[slack]'"
            ) from None
        self.client: WebClient = WebClient(
            token=settings.slack_bot_token.get_secret_value(),
            base_url=settings.slack_api_url,
            timeout=max(1, math.ceil(settings.webhook_timeout)),
            retry_handlers=[],
        )

    def _call(self, method: str, **arguments: Any) -> dict[str, Any]:
        from slack_sdk.errors import SlackApiError, SlackClientError

        try:
            response = getattr(self.client, method)(**arguments)
        except SlackApiError as exc:
            status = getattr(exc.response, "status_code", None)
            data = getattr(exc.response, "data", None)
            error = data.get("error") if isinstance(data, dict) else None
            retry = _retry_after(getattr(exc.response, "headers", {})) if status == 429 else None
            raise SlackCallError(str(error or f"HTTP {status}"), retry) from None
        except (SlackClientError, OSError) as exc:
            # Not the exception text: it may quote the URL.
            raise SlackCallError(type(exc).__name__) from None
        data = response.data
        return data if isinstance(data, dict) else {}

    def post(
        self,
        channel: str,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
        *,
        thread_ts: str | None = None,
        broadcast: bool = False,
    ) -> str:
        """Post a message (in a thread, with ``thread_ts``); the new message's ``ts``."""
        data = self._call(
            "chat_postMessage",
            channel=channel,
            text=text,
            blocks=blocks,
            thread_ts=thread_ts,
            reply_broadcast=broadcast or None,
            unfurl_links=False,
            unfurl_media=False,
        )
        return str(data.get("ts", ""))

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        """Replace a posted message's text and blocks."""
        self._call("chat_update", channel=channel, ts=ts, text=text, blocks=blocks)

    def ephemeral(self, channel: str, user: str, text: str) -> None:
        """A message only ``user`` sees in ``channel``."""
        self._call("chat_postEphemeral", channel=channel, user=user, text=text)

    def open_view(self, trigger_id: str, view: dict[str, Any]) -> None:
        """Open a modal for the user whose action gave ``trigger_id``."""
        self._call("views_open", trigger_id=trigger_id, view=view)
