"""Errors as JSON with a stable ``code``; toolq's error tree mapped to HTTP statuses."""

from __future__ import annotations

import json

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import Send

from toolq import errors
from toolq.api.auth import AuthenticationError, ForbiddenError
from toolq.redis_failures import RETRY_AFTER, store_error

STATUS: list[tuple[type[errors.ToolqError], int]] = [
    (AuthenticationError, 401),
    (ForbiddenError, 403),
    (errors.NotAuthorizedError, 403),
    (errors.CallNotFoundError, 404),
    (errors.RunNotFoundError, 404),
    (errors.NoHistoryError, 404),
    (errors.NotRetryableError, 409),
    (errors.ToolNotFoundError, 404),
    (errors.NotAwaitingApprovalError, 409),
    (errors.CallIdConflictError, 409),
    (errors.ApprovalExpiredError, 409),
    (errors.DigestMismatchError, 409),
    (errors.UndoError, 409),
    (errors.InvalidArgumentsError, 422),
    (errors.PayloadError, 400),
    (errors.WaitTimeoutError, 504),
    (errors.OverloadedError, 503),
    (errors.RedisUnavailableError, 503),
    (errors.StoreUnavailableError, 503),
    (errors.RedisAuthError, 500),
    (errors.RedisPermissionError, 500),
    (errors.ReplicationError, 503),
    (errors.AmbiguousIdError, 400),
]


def _shown(exc: errors.ToolqError) -> dict[str, object]:
    """The details a response carries besides code and message (why Redis refused)."""
    if isinstance(exc, errors.StoreUnavailableError):
        return {"reason": exc.details.get("reason")}
    return {}


def status_for(exc: errors.ToolqError) -> int:
    """The HTTP status of a toolq error."""
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 400


def error_body(code: str, message: str, **details: object) -> dict[str, object]:
    """The one shape of every error response."""
    return {"error": {"code": code, "message": message, **details}}


async def send_error(
    send: Send, status: int, code: str, message: str, *headers: tuple[bytes, bytes]
) -> None:
    """Answer with ``error_body`` as JSON straight over ASGI (middleware before any route)."""
    body = json.dumps(error_body(code, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def install(app: FastAPI, where: str = "") -> None:
    """Register the handlers that turn exceptions into JSON errors.

    ``where``: the Redis the app uses, named in its failures' messages (no password).
    """

    @app.exception_handler(errors.ToolqError)
    async def toolq_error(request: Request, exc: errors.ToolqError) -> JSONResponse:
        status = status_for(exc)
        if (
            isinstance(exc, errors.PayloadError)
            and "limit is" in exc.message
            and "bytes" in exc.message
        ):
            status = 413
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if isinstance(exc, errors.OverloadedError):
            headers = {"Retry-After": str(exc.details.get("retry_after", 5))}
        if isinstance(exc, errors.ReplicationError):
            headers = {"Retry-After": "1"}
        if isinstance(exc, errors.RedisUnavailableError | errors.StoreUnavailableError):
            headers = {"Retry-After": str(RETRY_AFTER)}
        return JSONResponse(
            error_body(exc.code, exc.message, **_shown(exc)), status_code=status, headers=headers
        )

    @app.exception_handler(redis.RedisError)
    async def redis_failed(request: Request, exc: redis.RedisError) -> JSONResponse:
        # Redis went away mid-request (after the clients' retries: the same 503 as the gate),
        # refused a write (full, read-only), or refused toolq's credentials: each its own code.
        error = store_error(exc, where)
        if error is None:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            error = errors.InternalError(f"Redis answered with an error: {first}")
            return JSONResponse(error_body(error.code, error.message), status_code=500)
        return await toolq_error(request, error)

    @app.exception_handler(ValueError)
    async def bad_value(request: Request, exc: ValueError) -> JSONResponse:
        # Request values that fail toolq's own parsing (formats, risk levels, modes).
        return JSONResponse(error_body("invalid_request", str(exc)), status_code=400)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return JSONResponse(error_body("invalid_request", problems), status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
            exc.status_code, "http_error"
        )
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)
