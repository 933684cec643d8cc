"""Entry point of the ``nrt`` console script: a click group with one module per sub-command."""

from __future__ import annotations

import importlib

import click

# (module, attribute) of every sub-command; each module owns one command or group.
_COMMANDS: tuple[tuple[str, str], ...] = (
    ("nrt.entrypoints.cli.manifest", "manifest"),
    ("nrt.entrypoints.cli.models", "models"),
    ("nrt.entrypoints.cli.up", "up"),
    ("nrt.entrypoints.cli.db", "db"),
    ("nrt.entrypoints.cli.health", "health"),
    ("nrt.entrypoints.cli.client", "chat"),
    ("nrt.entrypoints.cli.client", "status"),
    ("nrt.entrypoints.cli.keys_command", "keys"),
    ("nrt.entrypoints.cli.audit", "replay"),
    ("nrt.entrypoints.cli.audit", "audit"),
    ("nrt.entrypoints.cli.audit", "events"),
    ("nrt.entrypoints.cli.asyncapi", "asyncapi"),
    ("nrt.entrypoints.cli.bus", "bus"),
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
