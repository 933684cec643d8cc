"""``python -m specialist_worker``: run the specialist_worker service."""

from __future__ import annotations

from nrt.entrypoints.service import main
from specialist_worker.app import run

if __name__ == "__main__":
    main("specialist_worker", run)
