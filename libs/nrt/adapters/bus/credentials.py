"""How one process authenticates to NATS: its nkey seed, and the CA a ``tls://`` server must chain to.

The server side (who may do what, the seeds and the server config) is ``nrt.adapters.bus.auth``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

SEED_SUFFIX = ".nk"


def inbox_prefix(public_key: str) -> str:
    """The inbox prefix of the user with ``public_key``: its replies and JetStream deliveries land under it."""
    return f"_INBOX.{public_key}"


def public_key(seed: bytes) -> str:
    """The public key (``U...``) of a user seed."""
    pair = nkeys.from_seed(bytearray(seed.strip()))
    try:
        return bytes(pair.public_key).decode()
    finally:
        pair.wipe()


def seed_file(directory: Path, identity: str) -> Path:
    """``identity``'s seed in a directory written by ``nrt.adapters.bus.auth.ensure_credentials``."""
    return directory / f"{identity}{SEED_SUFFIX}"


@dataclass(frozen=True, slots=True)
class BusCredentials:
    """How one process authenticates to NATS: its nkey seed file, and the CA bundle a ``tls://`` server's
    certificate must chain to (the system's when None)."""

    seed_file: Path | None = None
    tls_ca: Path | None = None

    @classmethod
    def of(cls, directory: Path, identity: str, tls_ca: Path | None = None) -> BusCredentials:
        """``identity``'s credentials in a directory written by ``nrt.adapters.bus.auth.ensure_credentials``."""
        return cls(seed_file=seed_file(directory, identity), tls_ca=tls_ca)

    def options(self) -> dict[str, Any]:
        """nats-py's connect options for these credentials (none: an anonymous connection)."""
        options: dict[str, Any] = {}
        if self.seed_file is not None:
            try:
                key = public_key(self.seed_file.read_bytes())
            except OSError as exc:
                raise ConnectionError(f"cannot read the NATS seed {self.seed_file}: {exc.strerror}") from None
            except Exception as exc:
                raise ConnectionError(f"{self.seed_file} does not hold an nkey user seed: {exc}") from None
            options |= {"nkeys_seed": str(self.seed_file), "inbox_prefix": inbox_prefix(key)}
        if self.tls_ca is not None:
            options["tls"] = ssl.create_default_context(cafile=str(self.tls_ca))
        return options
