"""Run the alembic migrations programmatically (``nrt up``, tests, services at start)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config


def _script_location() -> Path:
    here = Path(__file__).resolve()
    # the repository (a checkout), else beside the nrt package
    for candidate in (here.parents[4] / "migrations", here.parents[2] / "migrations"):
        if (candidate / "env.py").exists():
            return candidate
    raise FileNotFoundError("the alembic migrations folder was not found beside the nrt package")


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_script_location()))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision`` (idempotent)."""
    command.upgrade(alembic_config(url), revision)
