"""Secrets `nrt up` generates once and keeps in its data directory (files of mode 0600)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SECRETS_DIR = "secrets"


def secret(data_dir: Path, name: str) -> str:
    """The secret ``name`` of the stack in ``data_dir``: read from ``secrets/<name>``, made there
    (random, URL-safe, 0600) the first time."""
    directory = data_dir / SECRETS_DIR
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / name
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        value = ""
    if value:
        return value
    value = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(value + "\n")
    return value
