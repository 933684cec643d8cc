"""``GET /schema/asyncapi.json``: the message contract beside the OpenAPI schema (``nrt asyncapi`` prints it)."""

from __future__ import annotations

from functools import cache
from typing import Any

from litestar import get

from nrt.adapters.bus.contract import asyncapi


@cache
def _document() -> dict[str, Any]:
    return asyncapi()


@get(
    "/schema/asyncapi.json",
    summary="The NATS message contract (AsyncAPI 3.0): every subject, payload and party",
    include_in_schema=False,
    sync_to_thread=False,
)
def asyncapi_document() -> dict[str, Any]:
    return _document()
