"""``python -m router_svc``: run the router_svc service."""

from __future__ import annotations

from nrt.entrypoints.service import main
from router_svc.app import run

if __name__ == "__main__":
    main("router_svc", run)
