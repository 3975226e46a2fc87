"""``toolq keys``: fresh keys as shell exports (``generate``), sealed credentials (``seal``)."""

from __future__ import annotations

import sys

import typer
from cryptography.fernet import Fernet

from toolq.cli.common import fail, print_json, settings_for
from toolq.quotas import ANY_TENANT, valid_tenant
from toolq.secretbox import SecretBox
from toolq.signing import generate_pair

keys = typer.Typer(help="Keys for signed approvals and encrypted secrets.", no_args_is_help=True)


def fresh_keys() -> dict[str, str]:
    """New keys by the environment variable each belongs in."""
    signing, verify = generate_pair()
    return {
        "TOOLQ_APPROVAL_SIGNING_KEY": signing,
        "TOOLQ_APPROVAL_VERIFY_KEYS": verify,
        "TOOLQ_SECRETS_KEY": Fernet.generate_key().decode(),
    }


@keys.command()
def generate(json_: bool = typer.Option(False, "--json", help="Print JSON instead.")) -> None:
    """Print a new Ed25519 approval key pair and a secrets key.

    The signing key goes to deciding processes only (API, CLI, approvers' clients), the
    verify key to workers; the secrets key to dispatchers and workers.
    """
    values = fresh_keys()
    if json_:
        print_json(values)
        return
    typer.echo("# signing key: API, CLI and approvers only; verify key: workers;")
    typer.echo("# secrets key: dispatchers and workers. Keep the first and the last secret.")
    for name, value in values.items():
        typer.echo(f"export {name}={value}")


@keys.command()
def seal(
    server: str = typer.Option(..., "--server", help="Name of the upstream MCP server."),
    header: str | None = typer.Option(None, "--header", help="The HTTP header it is for."),
    env: str | None = typer.Option(None, "--env", help="The environment variable it is for."),
    tenant: str | None = typer.Option(
        None, "--tenant", help="Its tenant_headers entry ('*': every other tenant)."
    ),
) -> None:
    """Seal a credential of an upstream MCP server, read from stdin, with TOOLQ_SECRETS_KEY.

    Prints ``toolq-sealed:...`` for TOOLQ_MCP_SERVERS: only a process holding the key opens
    it, and only for this server, tenant and header (or variable).
    """
    if (header is None) == (env is None):
        raise fail("name what the credential is for: --header NAME or --env NAME")
    if env is not None and tenant is not None:
        raise fail("--env credentials belong to the server, not to a tenant")
    if tenant is not None and tenant != ANY_TENANT:
        try:
            valid_tenant(tenant)
        except ValueError as exc:
            raise fail(str(exc)) from None
    box = SecretBox.from_settings(settings_for())
    if box is None:
        raise fail("no TOOLQ_SECRETS_KEY to seal with (`toolq keys generate` makes one)")
    value = sys.stdin.read().rstrip("\n")
    if not value:
        raise fail("nothing to seal: pipe the credential in on stdin")
    name = f"header:{header}" if header is not None else f"env:{env}"
    typer.echo(box.seal_credential(value, server, tenant or "", name))
