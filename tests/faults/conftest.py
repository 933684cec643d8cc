"""Fault tests on real processes: a stack started by `nrt up`, with the e2e tests' helpers and fixture."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

E2E = Path(__file__).parent.parent / "e2e"
sys.path.insert(0, str(E2E))  # stack_processes, as the e2e tests import it

_spec = importlib.util.spec_from_file_location("e2e_conftest", E2E / "conftest.py")
assert _spec is not None
assert _spec.loader is not None
_e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_e2e)

start_stack = _e2e.start_stack
