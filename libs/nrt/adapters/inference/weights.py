"""Tiers as objects: ``Weights`` (standby: the model bytes in RAM) and a live session (resident)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import onnxruntime as ort

from nrt.adapters.inference.artifact import MODEL_FILE, external_data_files, require_file

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
# When a session's intra-op threads spin-wait for work (session_options): NRT_WORKER_ORT_SPIN
Spin = Literal["never", "run", "always"]


@dataclass(frozen=True, slots=True, eq=False)
class Weights:
    """The standby tier: one artifact's ``model.onnx`` bytes held in RAM, no session; with the
    contents of its external data file when its weights exceed protobuf's 2 GB."""

    artifact_dir: Path
    data: bytes = field(repr=False)
    load_ms: float
    external: dict[str, bytes] = field(default_factory=dict, repr=False)  # external data file name -> contents

    @property
    def nbytes(self) -> int:
        return len(self.data) + sum(len(contents) for contents in self.external.values())


def load_weights(artifact_dir: Path | str) -> Weights:
    """Read ``model.onnx`` and its external data file, when it has one, into memory (standby): a
    session is then built from RAM alone (:func:`build_session`), without reading the disk again."""
    directory = Path(artifact_dir).resolve()
    path = require_file(directory, MODEL_FILE)
    started = time.perf_counter()
    data = path.read_bytes()
    external = {name: (directory / name).read_bytes() for name in external_data_files(directory)}
    return Weights(artifact_dir=directory, data=data, load_ms=(time.perf_counter() - started) * 1e3, external=external)


def select_providers(available: Sequence[str] | None = None) -> list[str]:
    """CUDA first when onnxruntime-gpu offers it, CPU always as the fallback."""
    offered = list(ort.get_available_providers() if available is None else available)
    return [CUDA, CPU] if CUDA in offered else [CPU]


def session_options(intra_op_threads: int | None = None, *, spin: Spin = "never") -> ort.SessionOptions:
    """Options for a serving session; ``spin`` is when ONNX Runtime's intra-op threads spin-wait for work.

    - ``never`` (the default): every wait sleeps. On shared cores (several models, the services and
      the servers on one host) spinning takes the CPU the other processes need.
    - ``run``: between the operators of a run, and not once it returns (``session.force_spinning_stop``).
      A decode step is a few hundred operators of microseconds each, and a thread that sleeps between
      them is woken for every one: Gemma 3 270M's bare loop on 2 cores decodes 15-20% faster than with
      ``never``, and a loop of short runs with pauses between them took less CPU than either other
      policy. For a worker with its cores to itself: where more threads are busy than there are cores,
      a thread spinning through its time slice delays another's.
    - ``always``: after each run too (ONNX Runtime's default).
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: CUDA-missing fallbacks are reported by us
    if intra_op_threads:
        options.intra_op_num_threads = intra_op_threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0" if spin == "never" else "1")
    if spin == "run":
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def build_session(
    weights: Weights,
    providers: Sequence[str] | None = None,
    *,
    intra_op_threads: int | None = None,
    spin: Spin = "never",
) -> ort.InferenceSession:
    """The resident tier: a live ONNX Runtime session built from the in-memory bytes.

    ``providers`` defaults to :func:`select_providers`. ONNX Runtime silently falls back to
    CPU when CUDA is offered but no GPU is usable: :func:`active_provider` tells which one won.
    """
    chosen = list(providers) if providers is not None else select_providers()
    options = session_options(intra_op_threads, spin=spin)
    if weights.external:  # the external data file's contents, from RAM (ONNX Runtime copies what it needs)
        names = list(weights.external)
        contents = [weights.external[name] for name in names]
        options.add_external_initializers_from_files_in_memory(names, contents, [len(c) for c in contents])
    return ort.InferenceSession(weights.data, sess_options=options, providers=chosen)


def active_provider(session: ort.InferenceSession) -> str:
    """The execution provider actually serving the session (the first one ORT kept)."""
    providers: list[str] = session.get_providers()
    return providers[0] if providers else CPU
