"""``BodySizeLimit``: a body over the limit is refused with a JSON 413 before the app sees it."""

from __future__ import annotations

import asyncio
import json

from starlette.types import Message, Receive, Scope, Send

from toolq.api.limits import BodySizeLimit


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _post(chunks: list[bytes], declared: int | None) -> list[Message]:
    headers = [] if declared is None else [(b"content-length", str(declared).encode())]
    scope: Scope = {"type": "http", "method": "POST", "path": "/v1/x", "headers": headers}
    pending = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return pending.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(BodySizeLimit(_app, max_bytes=10)(scope, receive, send))
    return sent


def test_a_body_over_the_limit_is_a_json_413_by_header_or_while_streaming() -> None:
    for chunks, declared in [([b"x" * 11], 11), ([b"x" * 6, b"x" * 6], None)]:
        start, body = _post(chunks, declared)
        assert start["status"] == 413
        headers = dict(start["headers"])
        assert headers[b"content-type"] == b"application/json"
        assert int(headers[b"content-length"]) == len(body["body"])
        error = json.loads(body["body"])["error"]
        assert error == {"code": "payload_too_large", "message": "request body over 10 bytes"}


def test_a_body_within_the_limit_reaches_the_app() -> None:
    start, body = _post([b"x" * 5, b"x" * 5], None)
    assert (start["status"], body["body"]) == (200, b"ok")
