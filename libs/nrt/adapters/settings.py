"""Process settings read from the environment: one typed class per reader, one place per variable.

``Settings`` holds what every NRT process reads (NATS, PostgreSQL, NRT_HOME, the log level,
trace export); ``HeartbeatSettings`` adds the heartbeat the workers and cluster_state share.
Each service subclasses one of them (``api_gateway.settings``, ``router_svc.settings``,
``specialist_worker.settings``, ``cluster_state.settings``), and so does the CLI
(``nrt.entrypoints.cli.settings``). ``from_env()`` reads a class from the environment and turns a bad
value into a ``SettingsError`` naming the variable. ``python -m tools.settings_doc`` renders
the README's configuration table from these classes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

import platformdirs
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from nrt.adapters.bus.servers import parse_servers

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
# How much the events stream keeps (PostgreSQL keeps the whole log): about 7 hours of 100 routed requests/s
# (4 events each, 4-5 GB of file storage), and a week at most.
EVENTS_STREAM_MAX_MSGS = 10_000_000
EVENTS_STREAM_MAX_AGE_S = 7 * 24 * 3600.0
ENV_PREFIX = "NRT_"

LogLevel = Literal["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"]


class SettingsError(ValueError):
    """A variable in the environment has a value its setting does not accept; the message names it."""


def _default_home() -> Path:
    return Path(platformdirs.user_cache_dir("nrt"))


def env_name(cls: type[BaseSettings], field: str) -> str:
    """The environment variable that sets ``field`` of ``cls``."""
    alias = cls.model_fields[field].validation_alias
    if isinstance(alias, str):
        return alias
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def _problem(cls: type[BaseSettings], error: Any) -> str:
    """One validation error as ``VARIABLE='value': what is wrong``."""
    loc = error["loc"]
    name = str(loc[0]) if loc else ""
    variable = env_name(cls, name) if name in cls.model_fields else name
    value = error.get("input")
    shown = f"={value!r}" if isinstance(value, str | int | float) else ""
    return f"{variable}{shown}: {error['msg']}"


class Settings(BaseSettings):
    """What every NRT process reads: where NATS, PostgreSQL and NRT's files are, and how it logs."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_ignore_empty=True,  # VAR= counts as unset: the default applies
        extra="ignore",
        frozen=True,
    )

    nats_url: str = Field(
        default=DEFAULT_NATS_URL,
        description="NATS of a running stack (`nats://host:4222`), or every server of a NATS cluster separated by "
        "commas (`nats://n1:4222,nats://n2:4222,nats://n3:4222`: a client reconnects to another when its server "
        "goes); `nrt up` starts an embedded one when unset (`--nats-cluster 3`: a cluster of three)",
    )
    nats_replicas: int | None = Field(
        default=None,
        ge=1,
        le=5,
        description="copies JetStream keeps of the events stream and of the key-value buckets and object stores "
        "NRT creates (1-5, at most the cluster's servers); an existing stream with fewer is raised to it by its "
        "owners (cluster_state, `nrt up`)",
        json_schema_extra={
            "default_text": "3 when the process knows of 3 or more NATS servers (those `NRT_NATS_URL` lists, or "
            "those the cluster advertises), else 1"
        },
    )
    nats_nkey_seed_file: Path | None = Field(
        default=None,
        description="this process's NATS identity: an nkey seed file (`nrt up` sets it per service; "
        "`nrt bus credentials DIR` writes them for compose); unset: an anonymous connection",
    )
    nats_tls_ca: Path | None = Field(
        default=None,
        description="CA bundle the NATS server's certificate must chain to (a `tls://` server); unset: the system's",
    )
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL of a running stack (`postgresql://user@host:5432/db`), used as given, database "
        "included; `nrt up` starts an embedded one (database `nrt`) when unset; cluster_state needs it",
    )
    home: Path = Field(
        default_factory=_default_home,
        description="prepared models and stack data",
        json_schema_extra={"default_text": "the user cache dir (`~/.cache/nrt` on Linux)"},
    )
    log_level: LogLevel = Field(default="INFO", description="log level of the services (any case)")
    otlp_endpoint: str | None = Field(
        default=None,
        validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT",
        description="export traces over OTLP/HTTP to this endpoint when set",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="serve this service's Prometheus metrics at `http://HOST:PORT/metrics` (`0`: a free port, "
        "logged); unset: no metrics port (the gateway also serves its own at `GET /metrics`)",
    )
    metrics_host: str = Field(
        default="0.0.0.0",
        description="the address the metrics port listens on (`nrt up`: the gateway's address)",
    )
    fused_graphs: bool = Field(
        default=True,
        description="`1`: an operator's decoder checkpoint is prepared for the CPU as a fused graph "
        "(onnxruntime-genai's model builder: GroupQueryAttention, MatMulNBits; a GGUF's int8 graph holds the "
        "GGUF's own blocks), the optimum export remaining the fallback for an architecture the builder lacks or a "
        "host without it (`nrt models info` says which); `0`: the optimum export always",
    )
    uvloop: bool = Field(
        default=True,
        description="`0`: the services run on asyncio's own event loop instead of uvloop (`bench.gateway` "
        "measures both)",
    )

    @model_validator(mode="before")
    @classmethod
    def _by_field_name(cls, data: Any) -> Any:
        """Code sets a renamed field by its name (``GatewaySettings(port=9000)``); the environment sets
        it only by its variable (``NRT_GATEWAY_PORT``), never by ``NRT_`` + the field's name."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name, info in cls.model_fields.items():
            if isinstance(info.validation_alias, str) and name in data:
                data[info.validation_alias] = data.pop(name)
        return data

    @field_validator("nats_url")
    @classmethod
    def _servers(cls, value: str) -> str:
        return ",".join(parse_servers(value))

    @property
    def nats_servers(self) -> tuple[str, ...]:
        """The NATS servers ``nats_url`` lists (one, or a cluster's)."""
        return parse_servers(self.nats_url)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @classmethod
    def from_env(cls) -> Self:
        """The settings in this process's environment; SettingsError names every variable with a bad value."""
        try:
            return cls()
        except ValidationError as exc:
            problems = "; ".join(_problem(cls, error) for error in exc.errors())
            raise SettingsError(f"invalid configuration: {problems}") from None


class HeartbeatSettings(Settings):
    """The heartbeat interval that the workers and gateways send at and cluster_state expects."""

    heartbeat_s: float = Field(
        default=0.5,
        gt=0,
        description="worker and gateway heartbeat interval in seconds (one is lost after `NRT_MISSED_HEARTBEATS` "
        "missed ones)",
    )


class EventsStreamSettings(Settings):
    """The events stream's retention, for the processes that create it or own it (cluster_state, ``nrt up``)."""

    events_stream_max_msgs: int = Field(
        default=EVENTS_STREAM_MAX_MSGS,
        ge=0,
        description="the events stream keeps at most this many messages, the oldest go first (`0`: no limit); "
        "PostgreSQL keeps the whole log, a follower that starts behind the stream takes a snapshot from "
        "cluster_state; it must exceed the events published while cluster_state is down or behind, or they "
        "never reach the log. cluster_state applies it to an existing stream at start",
    )
    events_stream_max_age_s: float = Field(
        default=EVENTS_STREAM_MAX_AGE_S,
        ge=0,
        description="the events stream drops messages older than this (seconds; `0`: no limit); the same "
        "caveat as `NRT_EVENTS_STREAM_MAX_MSGS`",
    )


def fused_graphs() -> bool:
    """Whether operators' decoders are prepared as fused graphs on the CPU (``NRT_FUSED_GRAPHS``)."""
    return Settings.from_env().fused_graphs


def nrt_home() -> Path:
    """Where NRT keeps model artifacts and stack data (``NRT_HOME``, else the user cache dir)."""
    return Settings.from_env().home


def models_dir() -> Path:
    """Cache of prepared model artifacts, one folder per catalogue entry."""
    return nrt_home() / "models"
