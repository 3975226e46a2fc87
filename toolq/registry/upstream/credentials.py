"""What a connection to an upstream server carries: its headers or environment, in plaintext.

Opened only when a session starts, in the process that connects (a worker), and kept only
in that connection's memory. A tenant without its own entry (nor a ``"*"`` one) on a
server with tenant credentials gets none: it never borrows another tenant's.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import SecretStr

from toolq.errors import ToolqError, UpstreamUnavailableError
from toolq.upstreams import McpServer, is_sealed_credential


class CredentialOpener(Protocol):
    """Opens sealed credentials (``toolq.secretbox.SecretBox`` is one)."""

    def open_credential(self, sealed: str, server: str, scope: str, name: str) -> str:
        """The plaintext of a value sealed for this server, tenant scope and name."""
        ...


def headers(
    server: McpServer, secrets: CredentialOpener | None, tenant: str | None
) -> dict[str, str]:
    """The HTTP headers of a connection for ``tenant`` (None: the server's own only)."""
    found = {
        name: _reveal(server, secrets, value, "", f"header:{name}")
        for name, value in server.headers.items()
    }
    if tenant is None or not server.tenant_headers:
        return found
    scope = server.credential_scope(tenant)
    if scope is None:
        raise no_credentials(server, tenant)
    own = server.tenant_headers[scope]
    found.update(
        {
            name: _reveal(server, secrets, value, scope, f"header:{name}")
            for name, value in own.items()
        }
    )
    return found


def environment(server: McpServer, secrets: CredentialOpener | None) -> dict[str, str]:
    """The environment variables a stdio server is given (on top of PATH/HOME/LANG)."""
    return {
        name: _reveal(server, secrets, value, "", f"env:{name}")
        for name, value in server.env.items()
    }


def no_credentials(server: McpServer, tenant: str) -> UpstreamUnavailableError:
    """The error of a call whose tenant has no credentials for ``server``."""
    return UpstreamUnavailableError(
        f"upstream MCP server {server.name!r} has no credentials for tenant {tenant!r}",
        server=server.name,
    )


def _reveal(
    server: McpServer, secrets: CredentialOpener | None, value: SecretStr, scope: str, name: str
) -> str:
    plain = value.get_secret_value()
    if not is_sealed_credential(plain):
        return plain
    where = f"{name} of MCP server {server.name!r}"
    if scope:
        where += f" (tenant {scope!r})"
    if secrets is None:
        raise UpstreamUnavailableError(
            f"{where} is sealed and this process has no TOOLQ_SECRETS_KEY to open it",
            server=server.name,
        )
    try:
        return secrets.open_credential(plain, server.name, scope, name)
    except ToolqError as exc:
        raise UpstreamUnavailableError(
            f"{where} cannot be opened: {exc.message}", server=server.name
        ) from None
