"""The hash chain: each row's hash covers the previous hash and the row's canonical content."""

from __future__ import annotations

import hashlib

GENESIS = bytes(32)


def row_hash(prev_hash: bytes, position: int, stream_id: str, stream_version: int, body: bytes) -> bytes:
    digest = hashlib.sha256(prev_hash)
    digest.update(position.to_bytes(8, "big"))
    digest.update(stream_id.encode())
    digest.update(b"\x00")
    digest.update(stream_version.to_bytes(8, "big"))
    digest.update(body)
    return digest.digest()
