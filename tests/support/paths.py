"""Where things are, for tests in any folder: the repository's root and the shared test fixtures."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"  # manifests the tests share (tiny-support.yaml, the spec's example)
