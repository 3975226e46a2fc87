"""Bearer tokens mapped to a principal, roles and a tenant; role and tenant checks."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from fastapi import Request

from toolq.errors import NotAuthorizedError, ToolqError, WrongTenantError
from toolq.models import RiskLevel
from toolq.quotas import DEFAULT_TENANT
from toolq.settings import ApiToken, Settings


class AuthenticationError(ToolqError):
    """No token, or a token nobody issued."""

    code = "unauthenticated"


class ForbiddenError(NotAuthorizedError):
    """A valid token without the role an endpoint needs."""

    code = "forbidden"


@dataclass(frozen=True)
class Principal:
    """The caller of a request."""

    name: str
    roles: frozenset[str]
    tenant: str | None = None
    """The tenant the token is bound to; ``None``: unbound (it may name any)."""

    def tenant_for(self, requested: str | None) -> str:
        """The tenant a request acts for (``WrongTenantError``: a bound caller names another)."""
        if self.tenant is None:
            return requested or DEFAULT_TENANT
        if requested is not None and requested != self.tenant:
            raise WrongTenantError(
                f"{self.name!r} is bound to tenant {self.tenant!r} and may not act for "
                f"tenant {requested!r}",
                tenant=requested,
            )
        return self.tenant

    def has(self, role: str) -> bool:
        """True for the role itself, or for admins."""
        return "admin" in self.roles or role in self.roles

    def require(self, *roles: str) -> None:
        """Raise ``ForbiddenError`` unless the caller has one of ``roles``."""
        if not any(self.has(role) for role in roles):
            raise ForbiddenError(f"{self.name!r} needs one of the roles: {', '.join(roles)}")

    def require_approver(self, risk: RiskLevel) -> None:
        """Raise unless the caller may decide calls of ``risk``."""
        self.require(f"approver:{risk.value}")

    def require_viewer(self) -> None:
        """Raise unless the caller may read (any role does)."""
        if not self.roles:
            raise ForbiddenError(f"{self.name!r} has no role")


def load_tokens(settings: Settings) -> dict[str, ApiToken]:
    """Tokens from ``TOOLQ_API_TOKENS`` and ``TOOLQ_API_TOKENS_FILE``."""
    tokens = dict(settings.api_tokens or {})
    if settings.api_tokens_file is not None:
        raw = json.loads(settings.api_tokens_file.read_text(encoding="utf-8"))
        tokens.update({k: ApiToken.model_validate(v) for k, v in raw.items()})
    return tokens


def generate_admin_token() -> tuple[str, ApiToken]:
    """A fresh random admin token (``toolq dev`` / ``toolq api`` print it)."""
    return f"tq_{secrets.token_urlsafe(24)}", ApiToken(principal="admin", roles=["admin"])


class Authenticator:
    """Resolves a request's bearer token, taken only from the ``Authorization`` header.

    A token in a URL would be written to access logs, proxies and browser history, so
    ``?token=`` is refused; event streams take a ticket instead (``toolq.api.tickets``).
    """

    def __init__(self, tokens: dict[str, ApiToken]) -> None:
        self.tokens = tokens

    def __call__(self, request: Request) -> Principal:
        """The caller of ``request``; raises ``AuthenticationError``."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        token = value.strip() if scheme.lower() == "bearer" else ""
        if not token:
            in_url = "token" in request.query_params
            hint = " (tokens are not accepted in the URL)" if in_url else ""
            raise AuthenticationError(f"missing bearer token (Authorization: Bearer <token>){hint}")
        # As bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a
        # 500), and a header value is its bytes decoded as latin-1.
        given = token.encode("latin-1")
        for known, grant in self.tokens.items():
            if secrets.compare_digest(known.encode(), given):
                return Principal(grant.principal, frozenset(grant.roles), grant.tenant)
        raise AuthenticationError("unknown token")
