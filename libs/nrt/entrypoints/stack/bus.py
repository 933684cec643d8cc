"""The authenticated bus of a stack that ``nrt up`` runs: its credentials directory, and who connects as whom.

``nrt up`` keeps the seeds and the server config in ``<data dir>/bus`` (made on the first run,
reused afterwards: ``nrt.adapters.bus.auth``), starts its embedded NATS with that config, connects as
``nrt`` itself and gives each service its own seed. With ``NRT_NATS_URL`` set, the server is
someone else's: ``nrt up`` generates nothing and the processes use the credentials their
environment names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nrt.adapters.bus.auth import CONFIG_FILE, ensure_credentials
from nrt.adapters.bus.credentials import BusCredentials, seed_file
from nrt.adapters.settings import Settings, env_name

BUS_DIR = "bus"
SEED_ENV = env_name(Settings, "nats_nkey_seed_file")


@dataclass(frozen=True, slots=True)
class StackBus:
    directory: Path

    @property
    def config(self) -> Path:
        return self.directory / CONFIG_FILE

    def credentials(self, identity: str) -> BusCredentials:
        return BusCredentials.of(self.directory, identity)

    def env(self, identity: str) -> dict[str, str]:
        """What a service process of ``identity`` is started with: its own seed."""
        return {SEED_ENV: str(seed_file(self.directory, identity))}


def stack_bus(data_dir: Path, nats_url_env: str = "NRT_NATS_URL") -> StackBus | None:
    """The stack's bus credentials (made or reused), or None when ``$nats_url_env`` names another server."""
    if os.environ.get(nats_url_env, "").strip():
        return None
    directory = data_dir / BUS_DIR
    ensure_credentials(directory)
    return StackBus(directory)


def cli_credentials(nats_url: str, data_dir: Path) -> BusCredentials | None:
    """The ``nrt`` identity of the local stack in ``data_dir`` when ``nats_url`` is that stack's NATS and the
    environment names no seed of its own; else None (the environment's credentials apply)."""
    from nrt.entrypoints.stack import endpoints

    if Settings.from_env().nats_nkey_seed_file is not None:
        return None
    running = endpoints.discover(data_dir)
    seed = seed_file(data_dir / BUS_DIR, "nrt")
    if running is None or running.nats_url != nats_url or not seed.exists():
        return None
    return BusCredentials(seed_file=seed)
