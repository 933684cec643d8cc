"""Entry point of the ``nrt`` console script: a click group with one module per sub-command."""

from __future__ import annotations

import importlib

import click

# (module, attribute) of every sub-command; each module owns one command or group.
_COMMANDS: tuple[tuple[str, str], ...] = (
    ("nrt.cli.manifest", "manifest"),
    ("nrt.cli.models", "models"),
    ("nrt.cli.up", "up"),
    ("nrt.cli.db", "db"),
    ("nrt.cli.health", "health"),
    ("nrt.cli.client", "chat"),
    ("nrt.cli.client", "status"),
    ("nrt.cli.keys", "keys"),
    ("nrt.cli.audit", "replay"),
    ("nrt.cli.audit", "audit"),
    ("nrt.cli.audit", "events"),
    ("nrt.cli.asyncapi", "asyncapi"),
    ("nrt.cli.bus", "bus"),
)


@click.group()
@click.version_option(package_name="nrt")
def cli() -> None:
    """NRT: a manifest-driven cluster manager for small language models."""


def _register() -> None:
    for module_name, attribute in _COMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # command not built yet
            raise
        cli.add_command(getattr(module, attribute))


_register()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
