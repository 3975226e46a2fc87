"""``toolq keys generate``: a fresh approval key pair and secrets key, as shell exports."""

from __future__ import annotations

import typer
from cryptography.fernet import Fernet

from toolq.cli.common import print_json
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
