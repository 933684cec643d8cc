"""The ``nrt`` command's settings: the shared ones and the gateway it talks to.

A command-line option wins over its variable; without either, client and ops commands
look for a stack started by ``nrt up`` on this machine.
"""

from __future__ import annotations

import click
from pydantic import Field, SecretStr

from nrt.adapters.settings import EventsStreamSettings, SettingsError


class CliSettings(EventsStreamSettings):
    """What the ``nrt`` command reads from the environment (``nrt up`` creates the events stream)."""

    gateway_url: str | None = Field(
        default=None,
        description="the gateway for `nrt chat` / `nrt status`",
        json_schema_extra={"default_text": "the local `nrt up` stack"},
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="the API key `nrt chat` / `nrt status` send",
        json_schema_extra={"default_text": "the local `nrt up` stack's"},
    )
    admin_key: SecretStr | None = Field(
        default=None,
        description="the admin key `nrt keys` sends",
        json_schema_extra={"default_text": "the local `nrt up` stack's"},
    )


def cli_settings() -> CliSettings:
    """The CLI's settings; a bad value is a usage error naming its variable."""
    try:
        return CliSettings.from_env()
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
