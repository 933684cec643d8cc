"""Process settings read from the environment; one place for every NRT_* variable."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs


def nrt_home() -> Path:
    """Where NRT keeps model artifacts and stack data (``NRT_HOME``, else the user cache dir)."""
    configured = os.environ.get("NRT_HOME")
    return Path(configured) if configured else Path(platformdirs.user_cache_dir("nrt"))


def models_dir() -> Path:
    """Cache of prepared model artifacts, one folder per catalogue entry."""
    return nrt_home() / "models"


@dataclass(frozen=True, slots=True)
class Settings:
    nats_url: str | None
    database_url: str | None
    home: Path

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            nats_url=os.environ.get("NRT_NATS_URL") or None,
            database_url=os.environ.get("NRT_DATABASE_URL") or None,
            home=nrt_home(),
        )
