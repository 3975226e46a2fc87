"""Request limits enforced before anything is parsed or written."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolq.api.errors import send_error
from toolq.dispatch.limits import check_payload
from toolq.errors import PayloadError
from toolq.settings import Settings


class BodySizeLimit:
    """Refuse bodies over ``max_payload_bytes`` with 413, by header or while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, refusing it once its body is too large."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        received = 0
        refused = False

        async def counting_receive() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    refused = True
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counting_receive, send)
        except _TooLarge:
            if refused:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        await send_error(
            send, 413, "payload_too_large", f"request body over {self.max_bytes} bytes"
        )


class _TooLarge(Exception):
    pass


def parse_body(raw: bytes, settings: Settings) -> Any:
    """Decode a JSON body within the depth and string-size limits."""
    if not raw:
        raise PayloadError("empty body: send the model response (or a list of calls) as JSON")
    payload = check_payload(raw, settings)
    longest = _longest_string(payload)
    if longest > settings.max_string_bytes:
        raise PayloadError(
            f"a string of {longest} bytes exceeds the limit of {settings.max_string_bytes} bytes"
        )
    return payload


Body = TypeVar("Body", bound=BaseModel)

DECISION_TEXT_FIELDS = ("reason", "note", "result")
"""Free text of a decision, stored with the call and in the audit stream."""


def decision_body_schema(model: type[BaseModel], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """``openapi_extra`` documenting a decision body (read raw, to apply the limits first).

    ``required``: fields of ``model`` this route requires although the model does not.
    """
    schema = model.model_json_schema()
    if required:
        schema["required"] = [*schema.get("required", []), *required]
    return {"requestBody": {"content": {"application/json": {"schema": schema}}}}


def digest_required(call_id: str, *, token: bool = False) -> RequestValidationError:
    """The 422 of an approval without the ``digest`` the approver reviewed.

    ``token``: of a request for a decision token instead (which approves no edit).
    """
    what = "a decision token approves" if token else "approve"
    edits = "" if token else " (with edited arguments too: the digest of what you were shown)"
    message = (
        f"{what} the call as you reviewed it: GET /v1/approvals/{call_id} and send back its "
        f'digest, {{"digest": "..."}}{edits}'
    )
    return reviewed_required("digest", message)


def reviewed_required(field: str, message: str) -> RequestValidationError:
    """The 422 of a decision without what its approver reviewed (``field`` names it).

    One status for every decision that must name what a person was shown (an approval, a
    decision token, a run's bulk approval, a gated undo): the body lacks a required field.
    """
    return RequestValidationError([{"loc": (field,), "msg": message, "type": "missing"}])


def parse_decision(raw: bytes, settings: Settings, model: type[Body]) -> Body | None:
    """An approve/deny body under the dispatch limits, its free text under ``max_reason_bytes``.

    Over a size limit is a ``PayloadError`` answered with 413; a body that does not fit
    ``model`` is a 422. ``None`` for an empty body (the defaults apply).
    """
    if not raw.strip():
        return None
    payload = check_payload(raw, settings)
    if isinstance(payload, dict):
        for name in DECISION_TEXT_FIELDS:
            value = payload.get(name)
            size = len(value.encode()) if isinstance(value, str) else 0
            if size > settings.max_reason_bytes:
                raise PayloadError(
                    f"{name} is {size} bytes; the limit is {settings.max_reason_bytes} bytes"
                )
    longest = _longest_string(payload)
    if longest > settings.max_string_bytes:
        raise PayloadError(
            f"a string of {longest} bytes in the body; the limit is "
            f"{settings.max_string_bytes} bytes"
        )
    if isinstance(payload, dict):
        # A misspelt field would be dropped: an edit ("argumets") approving the arguments as
        # they are, a "reson" denying without the reason. Refused as a model forbidding extras.
        unknown = [key for key in payload if key not in model.model_fields]
        if unknown:
            raise RequestValidationError(
                [
                    {"loc": (key,), "msg": "unknown field (misspelt?)", "type": "extra_forbidden"}
                    for key in unknown
                ]
            )
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None


def _longest_string(value: Any) -> int:
    longest = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            longest = max(longest, len(item.encode()))
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return longest
