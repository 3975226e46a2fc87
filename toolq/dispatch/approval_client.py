"""``ApprovalClient``: decide parked calls over the HTTP API, as the approver it authenticates.

Its credential is an approver's own API token, or a decision token (``tqd_...``) the API
issued to an approver for one call; either way the API records the decision as the principal
it authenticated, never as a name the caller chose. An app that collects a person's decision
in its own UI decides with this client and that person's credential, then resumes its agent
framework, whose toolq adapter reads the decision: the agent process itself never decides.
``AsyncApprovalClient`` is the same over ``httpx.AsyncClient``: each method is written once,
on ``ApprovalClient``, and builds its request for ``_send``, the one call that differs (the
async client's is awaited), as httpx's ``Client`` and ``AsyncClient`` share one base.

Errors come back as the toolq error of the API's ``code`` (``DigestMismatchError``,
``NotAwaitingApprovalError``, ``InvalidArgumentsError``...), else by HTTP status.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, cast
from urllib.parse import quote

from toolq import errors
from toolq.approvals.models import ApprovalRequest
from toolq.models import CallResult, Resolution, RiskLevel

if TYPE_CHECKING:
    import httpx

DECISION_TOKEN_PREFIX = "tqd_"
"""How a decision token starts (an API token never does)."""

T = TypeVar("T")
P = ParamSpec("P")

_BY_CODE: dict[str, type[errors.ToolqError]] = {
    cls.code: cls
    for cls in vars(errors).values()
    if inspect.isclass(cls) and issubclass(cls, errors.ToolqError)
}
_BY_STATUS: dict[int, type[errors.ToolqError]] = {
    400: errors.PayloadError,
    401: errors.NotAuthorizedError,
    403: errors.NotAuthorizedError,
    404: errors.CallNotFoundError,
    409: errors.ApprovalError,
    413: errors.PayloadError,
    422: errors.PayloadError,
    503: errors.RedisUnavailableError,
}


@dataclass(frozen=True)
class DecisionToken:
    """A decision token as the API issued it, for one decision on ``call_id``."""

    token: str
    call_id: str
    digest: str
    """The digest of the call's arguments the token was issued for."""
    approver: str
    """The approver the decision will be recorded as."""
    expires_in: float


@dataclass(frozen=True)
class _Request(Generic[T]):
    """One HTTP request and how its JSON answer is read."""

    method: str
    path: str
    read: Callable[[Any], T]
    json: Any = None
    params: dict[str, str] | None = None
    merge: Callable[[T, T], T] | None = None
    """How pages join, for a paged request (its ``X-Next-Cursor`` followed); else one answer."""


PAGE_LIMIT = 1000
"""Parked calls asked for per page of ``GET /v1/approvals`` (its largest ``limit``)."""


def _call_path(call_id: str) -> str:
    return quote(call_id, safe="")


def _approval_requests(data: Any) -> list[ApprovalRequest]:
    return [ApprovalRequest.model_validate(item) for item in data]


def _answer(request: _Request[T], response: httpx.Response) -> T:
    """The request's reading of a 2xx answer; else the toolq error the API answered with."""
    if response.is_success:
        return request.read(response.json())
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "", response.text[:1000] or response.reason_phrase
    cls = _BY_CODE.get(code) or _BY_STATUS.get(response.status_code, errors.ToolqError)
    raise cls(message, status=response.status_code, api_code=code)


class _Exchange(Generic[T]):
    """One request's answer over as many responses as it takes: its pages, followed."""

    def __init__(self, request: _Request[T]) -> None:
        self.request = request
        self.params = dict(request.params or {})
        self.answer: T | None = None
        self.done = False

    def arguments(self) -> dict[str, Any]:
        """The next response's ``request`` arguments (httpx's, sync or async)."""
        sent = self.request
        return {"method": sent.method, "url": sent.path, "json": sent.json, "params": self.params}

    def take(self, response: httpx.Response) -> None:
        """Read one response; ``done`` once the answer is whole."""
        value = _answer(self.request, response)
        merge = self.request.merge
        if merge is None or self.answer is None:
            self.answer = value
        else:
            self.answer = merge(self.answer, value)
        cursor = response.headers.get("X-Next-Cursor") if merge is not None else None
        self.done = not cursor
        if cursor:
            self.params["cursor"] = cursor


def _decisions_path(token: str) -> str:
    """Where decisions go: the path that accepts this credential."""
    return "/v1/decisions" if token.startswith(DECISION_TOKEN_PREFIX) else "/v1/approvals"


def _http_options(base_url: str, token: str, timeout: float) -> dict[str, Any]:
    """What ``httpx.Client`` and ``httpx.AsyncClient`` are built with alike."""
    return {
        "base_url": base_url.rstrip("/"),
        "headers": {"Authorization": f"Bearer {token}"},
        "timeout": timeout,
    }


class ApprovalClient:
    """Decides parked calls over the HTTP API with one approver's credential."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx  # imported here: `import toolq` stays free of it

        self._decisions = _decisions_path(token)
        self.http = httpx.Client(**_http_options(base_url, token, timeout), transport=transport)

    def _send(self, request: _Request[T]) -> T:
        """The one transport call; each method returns what it returns, untouched.

        So ``AsyncApprovalClient`` runs the same methods: there they return the coroutine of
        its own ``_send``.
        """
        exchange = _Exchange(request)
        while not exchange.done:
            exchange.take(self.http.request(**exchange.arguments()))
        return cast(T, exchange.answer)

    def _decide(self, call_id: str, action: str) -> str:
        return f"{self._decisions}/{_call_path(call_id)}/{action}"

    def pending(
        self,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
    ) -> list[ApprovalRequest]:
        """Calls awaiting a decision that this approver may see (API token only).

        Every page of ``GET /v1/approvals``, followed by its ``X-Next-Cursor``.
        """
        level = RiskLevel.parse(risk).value if risk is not None else None
        given = {"run_id": run_id, "risk": level, "tool": tool}
        params = {k: v for k, v in given.items() if v is not None}
        return self._send(
            _Request(
                "GET",
                "/v1/approvals",
                _approval_requests,
                params={**params, "limit": str(PAGE_LIMIT)},
                merge=operator.add,
            )
        )

    def get(self, call_id: str) -> ApprovalRequest:
        """A call as approvers see it: arguments (secrets masked), digest, preview, diff."""
        path = f"{self._decisions}/{_call_path(call_id)}"
        return self._send(_Request("GET", path, ApprovalRequest.model_validate))

    def approve(
        self,
        call_id: str,
        *,
        arguments: dict[str, Any] | None = None,
        note: str | None = None,
        digest: str | None = None,
        always: bool = False,
    ) -> CallResult:
        """Approve the call as it was shown: ``digest`` is the one ``get`` returned.

        With an API token the API requires ``digest`` (without it: ``PayloadError``, 422);
        a decision token is bound to the digest it was issued for. ``arguments`` is an edit
        (``{}``: no arguments; None: as they are), ``digest`` still the one shown before it.
        """
        # None leaves the arguments as they are; {} is an edit to no arguments.
        body: dict[str, Any] = {"always": always}
        if arguments is not None:
            body["arguments"] = arguments
        if note is not None:
            body["note"] = note
        if digest is not None:
            body["digest"] = digest
        path = self._decide(call_id, "approve")
        return self._send(_Request("POST", path, CallResult.model_validate, json=body))

    def deny(self, call_id: str, reason: str = "", *, always: bool = False) -> CallResult:
        """Deny with a reason the model will read."""
        body = {"reason": reason, "always": always}
        path = self._decide(call_id, "deny")
        return self._send(_Request("POST", path, CallResult.model_validate, json=body))

    def decision_token(self, call_id: str, digest: str) -> DecisionToken:
        """A one-time token for this approver's own decision on ``call_id`` as reviewed.

        ``digest``: the one ``get`` returned, of the call this approver reviewed; a call
        changed since gets no token (``DigestMismatchError``), and the token approves only
        that version of it.
        """
        path = f"/v1/approvals/{_call_path(call_id)}/decision-token"
        return self._send(
            _Request("POST", path, lambda data: DecisionToken(**data), json={"digest": digest})
        )

    def unknown(self, run_id: str | None = None) -> list[ApprovalRequest]:
        """Calls of unknown outcome (lost with their worker mid-call), longest lost first."""
        params = {"run_id": run_id} if run_id is not None else None
        return self._send(_Request("GET", "/v1/unknown", _approval_requests, params=params))

    def resolve(
        self,
        call_id: str,
        outcome: Resolution | str,
        *,
        note: str | None = None,
        result: str | None = None,
    ) -> CallResult:
        """Resolve a call of unknown outcome: ``succeeded``, ``failed`` or ``rerun``."""
        body: dict[str, Any] = {"outcome": Resolution(outcome).value}
        if note is not None:
            body["note"] = note
        if result is not None:
            body["result"] = result
        path = f"/v1/calls/{_call_path(call_id)}/resolve"
        return self._send(_Request("POST", path, CallResult.model_validate, json=body))

    def close(self) -> None:
        """Close the HTTP connections."""
        self.http.close()

    def __enter__(self) -> ApprovalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _awaited(
    method: Callable[Concatenate[ApprovalClient, P], T],
) -> Callable[Concatenate[AsyncApprovalClient, P], Coroutine[Any, Any, T]]:
    """``ApprovalClient``'s ``method`` on ``AsyncApprovalClient``: the same request, awaited.

    The method builds its request and returns what ``self._send`` returns: on the async
    client, the coroutine of its ``_send``, awaited here.
    """

    async def awaited(self: AsyncApprovalClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        sent = method(cast(ApprovalClient, self), *args, **kwargs)
        return await cast(Awaitable[T], sent)

    functools.update_wrapper(awaited, method)
    return awaited


class AsyncApprovalClient:
    """``ApprovalClient`` over ``httpx.AsyncClient``: its methods, awaited."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        import httpx

        self._decisions = _decisions_path(token)
        self.http = httpx.AsyncClient(
            **_http_options(base_url, token, timeout), transport=transport
        )

    async def _send(self, request: _Request[T]) -> T:
        exchange = _Exchange(request)
        while not exchange.done:
            exchange.take(await self.http.request(**exchange.arguments()))
        return cast(T, exchange.answer)

    _decide = ApprovalClient._decide  # the methods below build their paths with it
    pending = _awaited(ApprovalClient.pending)
    get = _awaited(ApprovalClient.get)
    approve = _awaited(ApprovalClient.approve)
    deny = _awaited(ApprovalClient.deny)
    decision_token = _awaited(ApprovalClient.decision_token)
    unknown = _awaited(ApprovalClient.unknown)
    resolve = _awaited(ApprovalClient.resolve)

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self.http.aclose()

    async def __aenter__(self) -> AsyncApprovalClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["DECISION_TOKEN_PREFIX", "ApprovalClient", "AsyncApprovalClient", "DecisionToken"]
