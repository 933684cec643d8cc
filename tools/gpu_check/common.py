"""What the GPU check's parts share: where the repository and the lent machine's staging dir are, the parts'
file names, and how the check speaks (a line, flushed)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
DEFAULT_DIR = ".gpu-check"
STAGING = Path("/tmp/nrt-gpu-check")  # on the lent machine: parts received by earlier calls, and the unpacked tree
ARCHIVE = "gpu-check.tar.xz"
MANIFEST = "manifest.json"


def say(message: str) -> None:
    print(message, flush=True)
