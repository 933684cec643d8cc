"""The deployment files as data, for the repository tests: the Dockerfile's stages and image tags, compose files,
the Kubernetes manifests (deploy/kubernetes) as their kustomization lists them, and who reads each variable."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from tools import settings_doc

from paths import ROOT

KUBERNETES = ROOT / "deploy" / "kubernetes"


def dockerfile_stages() -> dict[str, tuple[str, str]]:
    """The Dockerfile's stages in order: name -> (base image, body)."""
    text = (ROOT / "Dockerfile").read_text()
    parts = re.split(r"^FROM (\S+) AS (\S+)\n", text, flags=re.MULTILINE)
    return {name: (base, body) for base, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True)}


def instructions(body: str, keyword: str) -> list[str]:
    """A stage's ``keyword`` instructions (RUN, ENV, COPY), continuation lines joined, comments dropped."""
    lines = [line for line in body.splitlines() if not line.strip().startswith("#")]
    joined = " ".join(line.strip()[:-1] if line.rstrip().endswith("\\") else line.strip() + "\n" for line in lines)
    found = [" ".join(part.split()) for part in joined.split("\n")]
    return [line.removeprefix(f"{keyword} ") for line in found if line.startswith(f"{keyword} ")]


def image_tags() -> dict[str, str]:
    """The image each runtime target is built as, from the Dockerfile's own instructions at its top
    (``docker build --target runtime -t nrt:latest .``): target -> tag."""
    text = (ROOT / "Dockerfile").read_text()
    return dict(re.findall(r"^#\s+docker build --target (\S+) -t (\S+) \.", text, flags=re.MULTILINE))


def compose_file(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def readers() -> dict[str, set[str]]:
    """Each variable of the configuration table -> the processes that read it (``api_gateway`` ... ``nrt``)."""
    return {v.name: {process.strip("`") for process in v.read_by} for v in settings_doc.variables()}


def kustomization() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    return loaded


def documents(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of a file (empty ones dropped)."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kubernetes_resources() -> list[dict[str, Any]]:
    """Every object the kustomization's resource files hold, in their order."""
    return [doc for name in kustomization()["resources"] for doc in documents(KUBERNETES / name)]


def env_file(path: Path) -> dict[str, str]:
    """An env file as kustomize reads one (``KEY=VALUE`` lines; blank lines and ``#`` comments skipped)."""
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value
    return pairs
