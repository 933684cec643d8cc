"""Errors raised while starting or stopping infrastructure servers."""

from __future__ import annotations


class InfraError(RuntimeError):
    """Base class: something went wrong with a NATS or PostgreSQL server we manage."""


class ServerStartError(InfraError):
    """A server did not start, or did not become ready in time (the message carries its log tail)."""


class DataDirInUseError(InfraError):
    """Another live server already owns the data directory."""


class PortTimeoutError(InfraError, TimeoutError):
    """Nothing accepted connections on a TCP port within the allowed time."""
