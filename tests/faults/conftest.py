"""The fault suite: a real stack (`nrt up` as a subprocess, embedded NATS and PostgreSQL), one
fault at a time, in bounded time. Each test asserts the time to a clear error and to serving
again, that no event is lost or duplicated, that the hash chain is intact and that the replayed
log equals the live state. The stack fixtures are the e2e suite's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_E2E = Path(__file__).resolve().parents[1] / "e2e"
sys.path.insert(0, str(_E2E))  # stack_processes

_spec = importlib.util.spec_from_file_location("e2e_stack_fixtures", _E2E / "conftest.py")
assert _spec is not None
assert _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

start_stack = _fixtures.start_stack
