"""The pure core and the gateway import no inference engine: no ONNX Runtime, no numpy.

Each check runs in a fresh interpreter, so a module that some other test imported first
cannot hide (or fake) a heavy import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from paths import ROOT

HEAVY = ("onnxruntime", "numpy")

PURE = (
    "nrt.core.policies",
    "nrt.core.state",
    "nrt.core.manifest",
    "nrt.core.events",
    "nrt.core.protocol",
    "nrt.core.routing",
)
SERVICE_LAYER = ("prometheus_client",)  # metrics live in the services (nrt.adapters.metrics), never in the core
DATABASE = ("sqlalchemy", "psycopg", "alembic", "nrt.adapters.infra.embedded_postgres")
IN_MEMORY = ("nrt.adapters.store", "nrt.adapters.store.memory", "nrt.core.state.snapshot")

LIGHT = (
    "nrt.core.policies",
    "nrt.core.state",
    "nrt.core.manifest",
    "nrt.core.events",
    "nrt.core.protocol",
    "nrt.core.routing",
    "nrt.adapters.manifest_sources",
    "api_gateway.app",
    "cluster_state.service",
)


def loaded_after_import(module: str, watched: tuple[str, ...] = HEAVY) -> list[str]:
    """The ``watched`` modules in ``sys.modules`` after importing ``module`` in a fresh interpreter."""
    probe = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        f"print(json.dumps([name for name in {watched!r} if name in sys.modules]))\n"
    )
    path = os.pathsep.join([str(ROOT / "libs"), str(ROOT / "services"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": path},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"importing {module} failed:\n{done.stderr}"
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize("module", LIGHT)
def test_importing_the_core_or_the_gateway_loads_no_inference_engine(module: str) -> None:
    assert loaded_after_import(module) == [], f"importing {module} loads {', '.join(HEAVY)}"


def test_the_probe_sees_a_heavy_import() -> None:
    # the engine itself does load them: the check above would notice if the core reached it
    assert loaded_after_import("nrt.adapters.inference") == list(HEAVY)


@pytest.mark.parametrize("module", PURE)
def test_the_pure_core_loads_no_metrics_client(module: str) -> None:
    assert loaded_after_import(module, SERVICE_LAYER) == [], f"importing {module} loads {SERVICE_LAYER}"


def test_the_probe_sees_the_metrics_client() -> None:
    assert loaded_after_import("nrt.adapters.metrics", SERVICE_LAYER) == list(SERVICE_LAYER)


@pytest.mark.parametrize("module", IN_MEMORY)
def test_the_in_memory_store_loads_no_database_code(module: str) -> None:
    # the run-time side of tests/fast/repository/test_import_rules.py's rule (b)
    assert loaded_after_import(module, DATABASE) == [], f"importing {module} loads database code"


def test_the_probe_sees_the_database_code() -> None:
    assert loaded_after_import("nrt.adapters.store.postgres", DATABASE[:2]) == list(DATABASE[:2])


def test_the_bus_contract_loads_no_service_shell() -> None:
    # the wire types (Health included) live in nrt.core.protocol, not in the shell nrt.entrypoints.service
    shell = ("nrt.entrypoints.service", "faststream", "uvloop", "prometheus_client")
    assert loaded_after_import("nrt.adapters.bus.contract", shell) == []
