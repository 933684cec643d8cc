"""``nrt bus credentials DIR``: per-service NATS credentials and the server config, for compose and several hosts."""

from __future__ import annotations

from pathlib import Path

import click

from nrt.adapters.bus.auth import ServerTls, ensure_credentials, permissions
from nrt.adapters.bus.contract import SERVICES
from nrt.adapters.bus.credentials import seed_file


@click.group()
def bus() -> None:
    """The bus's security: who may connect to NATS and what each may do."""


@bus.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--tls-cert", type=str, default=None, help="server certificate, as the server sees the path (TLS)")
@click.option("--tls-key", type=str, default=None, help="server private key, as the server sees the path (TLS)")
def credentials(directory: Path, tls_cert: str | None, tls_key: str | None) -> None:
    """Write a seed per service to DIRECTORY (kept if there) and nats-server.conf for them.

    Start nats-server with `-c DIRECTORY/nats-server.conf` and give each process its own seed in
    NRT_NATS_NKEY_SEED_FILE (the CLI: nrt.nk). Re-run after an upgrade: the permissions come from
    the message contract.
    """
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("give both --tls-cert and --tls-key, or neither")
    tls = ServerTls(Path(tls_cert), Path(tls_key)) if tls_cert and tls_key else None
    try:
        config = ensure_credentials(directory, tls=tls)
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"server config: {config}")
    for identity in SERVICES:
        allowed = permissions(identity)
        click.echo(f"{identity:>18}: {seed_file(directory, identity)}  (publishes {', '.join(allowed.publish)})")
