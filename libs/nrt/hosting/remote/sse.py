"""Server-sent events, as both wire formats stream them: the ``data`` of each event."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx


async def data_events(response: httpx.Response) -> AsyncIterator[str]:
    """The data of each event in ``response`` (its ``data:`` lines joined by newlines); events without
    data (comments, keep-alives) are skipped."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:  # a last event without its closing blank line
        yield "\n".join(data)
