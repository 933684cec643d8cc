"""``nrt asyncapi``: the message contract (every NATS subject, payload and party) as AsyncAPI 3.0."""

from __future__ import annotations

import json

import click
import yaml


@click.command()
@click.option("--yaml", "as_yaml", is_flag=True, help="YAML instead of JSON.")
def asyncapi(as_yaml: bool) -> None:
    """Print the AsyncAPI document of NRT's messages (the gateway serves it at /schema/asyncapi.json)."""
    from nrt.adapters.bus.contract import asyncapi as document

    spec = document()
    click.echo(yaml.safe_dump(spec, sort_keys=False) if as_yaml else json.dumps(spec, indent=2))
