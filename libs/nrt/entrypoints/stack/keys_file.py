"""The API keys of a stack started by ``nrt up``, kept in its data directory for client commands.

``nrt up`` takes ``NRT_API_KEY`` (infer) and ``NRT_ADMIN_KEY`` (admin) when set, else the keys
of its last run, else new ones; it writes those in force to ``keys.json`` (mode 0600) and hands
them to cluster_state, which records their hashes. ``nrt chat``, ``nrt status`` and ``nrt keys``
read the file when no key is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec

from nrt.core.api_keys import generate_key
from nrt.entrypoints.stack.endpoints import stack_dir, write_private

KEYS_FILE = "keys.json"
API_KEY_ENV = "NRT_API_KEY"
ADMIN_KEY_ENV = "NRT_ADMIN_KEY"


class StackKeys(msgspec.Struct, frozen=True, kw_only=True):
    api_key: str  # infer scope
    admin_key: str  # admin scope

    def env(self) -> dict[str, str]:
        """The variables that give these keys to cluster_state."""
        return {API_KEY_ENV: self.api_key, ADMIN_KEY_ENV: self.admin_key}


def read(directory: Path | None = None) -> StackKeys | None:
    """The keys a local stack wrote, or None."""
    try:
        return msgspec.json.decode(((directory or stack_dir()) / KEYS_FILE).read_bytes(), type=StackKeys)
    except (OSError, msgspec.DecodeError):
        return None


def write(keys: StackKeys, directory: Path) -> Path:
    """Write ``keys`` readable by this user only (the file is never world- or group-readable)."""
    path = directory / KEYS_FILE
    write_private(path, msgspec.json.encode(keys))
    return path


def ensure(directory: Path, env: Mapping[str, str]) -> tuple[StackKeys, list[str]]:
    """The keys a stack in ``directory`` runs with, written there, and the scopes of those newly made.

    Each key: its variable in ``env`` when set (stripped), else the one ``directory`` holds
    from a previous run, else a new one."""
    previous = read(directory)
    made: list[str] = []

    def pick(variable: str, kept: str | None, scope: str) -> str:
        given = (env.get(variable) or "").strip()
        if given:
            return given
        if kept:
            return kept
        made.append(scope)
        return generate_key()

    keys = StackKeys(
        api_key=pick(API_KEY_ENV, previous.api_key if previous else None, "infer"),
        admin_key=pick(ADMIN_KEY_ENV, previous.admin_key if previous else None, "admin"),
    )
    write(keys, directory)
    return keys, made
