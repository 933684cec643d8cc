"""``GET /ui``: the dashboard, static files shipped in the package (no build step, no CDN).

The page itself is open; it asks for an API key, keeps it in the browser's storage and sends
it on its calls to the public ``/v1`` routes (``/v1/cluster``, ``/v1/events/stream``, and
``PUT /v1/manifest`` with an admin key), so it shows nothing the key may not see.
"""

from __future__ import annotations

from pathlib import Path

from litestar import Router
from litestar.static_files import create_static_files_router

UI_DIR = Path(__file__).parent / "ui"


def ui_router() -> Router:
    return create_static_files_router(path="/ui", directories=[UI_DIR], html_mode=True, name="ui")
