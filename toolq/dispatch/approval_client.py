"""``ApprovalClient``: decide parked calls over the HTTP API, as the approver it authenticates.

Its credential is an approver's own API token, or a decision token (``tqd_...``) the API
issued to an approver for one call; either way the API records the decision as the principal
it authenticated, never as a name the caller chose. An app that collects a person's decision
in its own UI decides with this client and that person's credential, then resumes its agent
framework, whose toolq adapter reads the decision: the agent process itself never decides.
``AsyncApprovalClient`` is the same over ``httpx.AsyncClient``.

Errors come back as the toolq error of the API's ``code`` (``DigestMismatchError``,
``NotAwaitingApprovalError``, ``InvalidArgumentsError``...), else by HTTP status.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from urllib.parse import quote

from toolq import errors
from toolq.approvals.models import ApprovalRequest
from toolq.models import CallResult, Resolution, RiskLevel

if TYPE_CHECKING:
    import httpx

DECISION_TOKEN_PREFIX = "tqd_"
"""How a decision token starts (an API token never does)."""

T = TypeVar("T")

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


PAGE_LIMIT = 1000
"""Parked calls asked for per page of ``GET /v1/approvals`` (its largest ``limit``)."""


def _call_path(call_id: str) -> str:
    return quote(call_id, safe="")


class _Requests:
    """The requests of both clients; decisions go where the credential is accepted."""

    def __init__(self, token: str) -> None:
        by_decision_token = token.startswith(DECISION_TOKEN_PREFIX)
        self.base = "/v1/decisions" if by_decision_token else "/v1/approvals"

    def _decide(self, call_id: str, action: str) -> str:
        return f"{self.base}/{_call_path(call_id)}/{action}"

    def pending(
        self, run_id: str | None, risk: RiskLevel | str | None, tool: str | None
    ) -> _Request[list[ApprovalRequest]]:
        level = RiskLevel.parse(risk).value if risk is not None else None
        params = {"run_id": run_id, "risk": level, "tool": tool}
        return _Request(
            "GET",
            "/v1/approvals",
            lambda data: [ApprovalRequest.model_validate(item) for item in data],
            params={k: v for k, v in params.items() if v is not None},
        )

    def get(self, call_id: str) -> _Request[ApprovalRequest]:
        path = f"{self.base}/{_call_path(call_id)}"
        return _Request("GET", path, ApprovalRequest.model_validate)

    def approve(
        self,
        call_id: str,
        arguments: dict[str, Any] | None,
        note: str | None,
        digest: str | None,
        always: bool,
    ) -> _Request[CallResult]:
        # None leaves the arguments as they are; {} is an edit to no arguments.
        body: dict[str, Any] = {"always": always}
        if arguments is not None:
            body["arguments"] = arguments
        if note is not None:
            body["note"] = note
        if digest is not None:
            body["digest"] = digest
        return _Request(
            "POST", self._decide(call_id, "approve"), CallResult.model_validate, json=body
        )

    def deny(self, call_id: str, reason: str, always: bool) -> _Request[CallResult]:
        body = {"reason": reason, "always": always}
        return _Request("POST", self._decide(call_id, "deny"), CallResult.model_validate, json=body)

    def decision_token(self, call_id: str) -> _Request[DecisionToken]:
        path = f"/v1/approvals/{_call_path(call_id)}/decision-token"
        return _Request("POST", path, lambda data: DecisionToken(**data))

    def unknown(self, run_id: str | None) -> _Request[list[ApprovalRequest]]:
        return _Request(
            "GET",
            "/v1/unknown",
            lambda data: [ApprovalRequest.model_validate(item) for item in data],
            params={"run_id": run_id} if run_id is not None else None,
        )

    def resolve(
        self, call_id: str, outcome: Resolution | str, note: str | None, result: str | None
    ) -> _Request[CallResult]:
        body: dict[str, Any] = {"outcome": Resolution(outcome).value}
        if note is not None:
            body["note"] = note
        if result is not None:
            body["result"] = result
        path = f"/v1/calls/{_call_path(call_id)}/resolve"
        return _Request("POST", path, CallResult.model_validate, json=body)


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

        self._requests = _Requests(token)
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    def _send(self, request: _Request[T]) -> T:
        response = self.http.request(
            request.method, request.path, json=request.json, params=request.params
        )
        return _answer(request, response)

    def pending(
        self,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
    ) -> list[ApprovalRequest]:
        """Calls awaiting a decision that this approver may see (API token only).

        Every page of ``GET /v1/approvals``, followed by its ``X-Next-Cursor``.
        """
        request = self._requests.pending(run_id, risk, tool)
        found: list[ApprovalRequest] = []
        params = {**(request.params or {}), "limit": str(PAGE_LIMIT)}
        while True:
            response = self.http.request(request.method, request.path, params=params)
            page: list[ApprovalRequest] = _answer(request, response)
            found.extend(page)
            cursor = response.headers.get("X-Next-Cursor")
            if not cursor:
                return found
            params["cursor"] = cursor

    def get(self, call_id: str) -> ApprovalRequest:
        """A call as approvers see it: arguments (secrets masked), digest, preview, diff."""
        return self._send(self._requests.get(call_id))

    def approve(
        self,
        call_id: str,
        *,
        arguments: dict[str, Any] | None = None,
        note: str | None = None,
        digest: str | None = None,
        always: bool = False,
    ) -> CallResult:
        """Approve: ``arguments`` is an edit (``{}``: no arguments; None: as they are)."""
        return self._send(self._requests.approve(call_id, arguments, note, digest, always))

    def deny(self, call_id: str, reason: str = "", *, always: bool = False) -> CallResult:
        """Deny with a reason the model will read."""
        return self._send(self._requests.deny(call_id, reason, always))

    def decision_token(self, call_id: str) -> DecisionToken:
        """A one-time token for this approver's own decision on ``call_id``."""
        return self._send(self._requests.decision_token(call_id))

    def unknown(self, run_id: str | None = None) -> list[ApprovalRequest]:
        """Calls of unknown outcome (lost with their worker mid-call), longest lost first."""
        return self._send(self._requests.unknown(run_id))

    def resolve(
        self,
        call_id: str,
        outcome: Resolution | str,
        *,
        note: str | None = None,
        result: str | None = None,
    ) -> CallResult:
        """Resolve a call of unknown outcome: ``succeeded``, ``failed`` or ``rerun``."""
        return self._send(self._requests.resolve(call_id, outcome, note, result))

    def close(self) -> None:
        """Close the HTTP connections."""
        self.http.close()

    def __enter__(self) -> ApprovalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncApprovalClient:
    """``ApprovalClient`` over ``httpx.AsyncClient``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        import httpx

        self._requests = _Requests(token)
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    async def _send(self, request: _Request[T]) -> T:
        response = await self.http.request(
            request.method, request.path, json=request.json, params=request.params
        )
        return _answer(request, response)

    async def pending(
        self,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
    ) -> list[ApprovalRequest]:
        """See ``ApprovalClient.pending``."""
        request = self._requests.pending(run_id, risk, tool)
        found: list[ApprovalRequest] = []
        params = {**(request.params or {}), "limit": str(PAGE_LIMIT)}
        while True:
            response = await self.http.request(request.method, request.path, params=params)
            page: list[ApprovalRequest] = _answer(request, response)
            found.extend(page)
            cursor = response.headers.get("X-Next-Cursor")
            if not cursor:
                return found
            params["cursor"] = cursor

    async def get(self, call_id: str) -> ApprovalRequest:
        """See ``ApprovalClient.get``."""
        return await self._send(self._requests.get(call_id))

    async def approve(
        self,
        call_id: str,
        *,
        arguments: dict[str, Any] | None = None,
        note: str | None = None,
        digest: str | None = None,
        always: bool = False,
    ) -> CallResult:
        """See ``ApprovalClient.approve``."""
        return await self._send(self._requests.approve(call_id, arguments, note, digest, always))

    async def deny(self, call_id: str, reason: str = "", *, always: bool = False) -> CallResult:
        """See ``ApprovalClient.deny``."""
        return await self._send(self._requests.deny(call_id, reason, always))

    async def decision_token(self, call_id: str) -> DecisionToken:
        """See ``ApprovalClient.decision_token``."""
        return await self._send(self._requests.decision_token(call_id))

    async def unknown(self, run_id: str | None = None) -> list[ApprovalRequest]:
        """See ``ApprovalClient.unknown``."""
        return await self._send(self._requests.unknown(run_id))

    async def resolve(
        self,
        call_id: str,
        outcome: Resolution | str,
        *,
        note: str | None = None,
        result: str | None = None,
    ) -> CallResult:
        """See ``ApprovalClient.resolve``."""
        return await self._send(self._requests.resolve(call_id, outcome, note, result))

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self.http.aclose()

    async def __aenter__(self) -> AsyncApprovalClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["DECISION_TOKEN_PREFIX", "ApprovalClient", "AsyncApprovalClient", "DecisionToken"]
