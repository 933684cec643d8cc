"""Running NRT's docker-compose.yml for real, for the compose test (tests/compose).

Everything goes through the scripts an operator runs (scripts/docker-engine, scripts/offline-images,
scripts/compose-setup) and through compose itself; the stack is reached only through the ports it
publishes on 127.0.0.1. A :class:`ComposeStack` is one compose project of its own (its name, its
environment file, its bus credentials, free host ports), so that it never meets an operator's stack
or the test suite's own servers on this host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from nrt.adapters.infra import free_port
from paths import ROOT

# the public images the stack needs without a profile (the python base is the Dockerfile's)
DEFAULT_IMAGES = ("python:3.11-slim-bookworm", "nats:2.11-alpine", "postgres:16-alpine", "prom/prometheus:v3.5.0")
OBSERVABILITY_IMAGES = ("jaegertracing/all-in-one:1.62.0", "grafana/grafana:12.1.1")
CUDA_BASE = "nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04"
STAND_IN_LABEL = "org.nrt.offline-stand-in"
PUBLISHED = ("GATEWAY", "NATS", "POSTGRES", "PROMETHEUS")


def run(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 600) -> str:
    """``argv`` in the repository root; its output; a failure names the command and its output."""
    done = subprocess.run(
        list(argv),
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"{' '.join(argv)} exited with {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return str(done.stdout) + str(done.stderr)


def docker_engine() -> str | None:
    """None when a Docker engine answers (scripts/docker-engine starts one if it can); else why not."""
    done = subprocess.run([str(ROOT / "scripts" / "docker-engine")], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return f"no Docker engine: {(done.stderr or done.stdout).strip()}"
    return None


def compose_command() -> list[str] | None:
    """The compose this host has: `docker compose` (v2) or `docker-compose` (v1), else None."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def has_image(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


def pull(name: str, within: float = 60) -> str | None:
    """None once ``name`` is pulled; else why it could not be."""
    try:
        done = subprocess.run(["docker", "pull", "-q", name], capture_output=True, text=True, timeout=within)
    except subprocess.TimeoutExpired:
        return f"docker pull {name} did not finish in {within:.0f} s"
    if done.returncode != 0:
        return f"docker pull {name} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
    return None


def is_stand_in(name: str) -> bool:
    out = subprocess.run(
        ["docker", "image", "inspect", "-f", f'{{{{index .Config.Labels "{STAND_IN_LABEL}"}}}}', name],
        capture_output=True,
        text=True,
    )
    return out.returncode == 0 and out.stdout.strip() == "1"


def image_size(name: str) -> int:
    return int(run(["docker", "image", "inspect", "-f", "{{.Size}}", name]).strip())


def read_env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {key: value for key, value in pairs}


@dataclass
class ComposeStack:
    """One compose project of NRT's docker-compose.yml, in ``workdir`` (environment file, bus credentials)."""

    compose: list[str]
    workdir: Path
    project: str = "nrt-compose-test"
    ports: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ports:
            self.ports = {name: free_port() for name in PUBLISHED}

    @property
    def env_file(self) -> Path:
        return self.workdir / "compose.env"

    @property
    def env(self) -> dict[str, str]:
        """What every compose command of this project runs with."""
        return {
            "COMPOSE_PROJECT_NAME": self.project,
            "NRT_BUS_DIR": str(self.workdir / "bus"),
            **{f"NRT_PUBLISH_{name}_PORT": str(port) for name, port in self.ports.items()},
        }

    def __call__(self, *args: str, timeout: float = 900) -> str:
        """``compose ARGS`` for this project."""
        return run(
            [*self.compose, "--env-file", str(self.env_file), "-f", "docker-compose.yml", *args], self.env, timeout
        )

    def timed(self, name: str, *args: str, timeout: float = 900) -> str:
        started = time.monotonic()
        out = self(*args, timeout=timeout)
        self.timings[name] = time.monotonic() - started
        return out

    @property
    def settings(self) -> dict[str, str]:
        return read_env_file(self.env_file)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['GATEWAY']}"

    @property
    def database_url(self) -> str:
        return f"postgresql://nrt:{self.settings['NRT_POSTGRES_PASSWORD']}@127.0.0.1:{self.ports['POSTGRES']}/nrt"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.settings['NRT_API_KEY']}"}

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.settings['NRT_ADMIN_KEY']}"}

    def container(self, service: str) -> str:
        return self("ps", "-q", service).strip().splitlines()[-1]

    def health(self, service: str) -> str:
        state = json.loads(run(["docker", "inspect", "-f", "{{json .State}}", self.container(service)]))
        return str(state.get("Health", {}).get("Status", state["Status"]))

    def wait_healthy(self, services: Sequence[str], within: float) -> None:
        deadline = time.monotonic() + within
        while (unhealthy := [s for s in services if self.health(s) != "healthy"]) and time.monotonic() < deadline:
            time.sleep(2)
        assert not unhealthy, f"not healthy within {within:.0f} s: {unhealthy}\n{self('logs', '--tail', '40')}"

    def wait_ready(self, within: float) -> None:
        """Until the gateway answers /readyz through its published port."""
        deadline = time.monotonic() + within
        while True:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (
                f"/readyz not green within {within:.0f} s\n{self('logs', '--tail', '40')}"
            )
            time.sleep(1)
