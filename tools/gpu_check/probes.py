"""The probes the stages run (under the staged site, with the GPU build): the versions, and a resident's
device bytes against NVML's reading."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
from pathlib import Path
from typing import Any

from tools.gpu_check.common import say
from tools.gpu_check.results import LLAMA_CPP_NOT_AVAILABLE

CUDA = "CUDAExecutionProvider"


def versions(out: Path) -> int:
    """Python, ONNX Runtime and its providers, nvidia-ml-py, the CUDA libraries found; llama.cpp's CUDA build."""
    import onnxruntime as ort

    found: dict[str, str] = {
        "python": platform.python_version(),
        "onnxruntime": f"{ort.__version__} ({ort.__file__})",
        "onnxruntime providers": ", ".join(ort.get_available_providers()),
    }
    with contextlib.suppress(Exception):
        import importlib.metadata as metadata

        found["nvidia-ml-py"] = metadata.version("nvidia-ml-py")
        found["numpy"] = metadata.version("numpy")
    try:
        import llama_cpp

        offload = bool(llama_cpp.llama_supports_gpu_offload())
        found["llama.cpp CUDA"] = (
            f"llama-cpp-python {llama_cpp.__version__} offloads to the GPU, but its peer needs gemma3-270m's GGUF, "
            "which is not carried: not measured"
            if offload
            else f"not available: llama-cpp-python {llama_cpp.__version__} is a CPU build"
        )
    except ImportError:
        found["llama.cpp CUDA"] = LLAMA_CPP_NOT_AVAILABLE
    out.write_text(json.dumps(found, indent=2) + "\n")
    for key, value in found.items():
        say(f"{key}: {value}")
    return 0 if CUDA in ort.get_available_providers() else 1


def process_gpu_bytes(nvml: Any, handle: Any, pid: int) -> int | None:
    """The GPU memory NVML charges to process ``pid`` (None where NVML does not account per process)."""
    try:
        for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == pid and process.usedGpuMemory is not None:
                return int(process.usedGpuMemory)
    except nvml.NVMLError:
        return None
    return None


def resident_bytes(out: Path) -> int:
    """tiny-llama's cuda variant made resident through ModelHost (the worker's own measurement: the device
    bytes in use before and after the session's build, from NVML) against NVML's per-process account of
    this process over the same promotion (or, where NVML keeps none, the device's bytes in use)."""
    from nrt.adapters.inference import ArtifactRegistry
    from nrt.hosting.device_memory import CudaMemory, load_nvml
    from nrt.hosting.model_host import ModelHost
    from nrt.hosting.model_sources import LocalArtifact, resolve

    source = "catalogue://tiny-llama"
    memory = CudaMemory.open()
    nvml = load_nvml()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    host = ModelHost(ArtifactRegistry([CUDA, "CPUExecutionProvider"]), memory=memory)
    artifact = resolve(source)
    assert isinstance(artifact, LocalArtifact)
    try:
        host.load("m", source, artifact)
        host.promote("m")  # the first session brings up the CUDA context: the measured cycle is the second
        host.demote("m")
        gc.collect()
        device_before, process_before = memory.used_bytes(), process_gpu_bytes(nvml, handle, os.getpid())
        promoted = host.promote("m")
        device_after, process_after = memory.used_bytes(), process_gpu_bytes(nvml, handle, os.getpid())
        if process_before is not None and process_after is not None:
            nvml_bytes, how = process_after - process_before, "NVML's per-process account over the promotion"
        else:
            nvml_bytes, how = (
                device_after - device_before,
                "NVML's device bytes in use over the promotion (no per-process account here)",
            )
        found = {
            "measured": promoted.bytes_held,
            "nvml": nvml_bytes,
            "how": how,
            "device_delta": device_after - device_before,
            "process_delta": None
            if process_before is None or process_after is None
            else process_after - process_before,
            "provider": host.registry.usage()[0].provider,
        }
    finally:
        host.close()
    out.write_text(json.dumps(found, indent=2) + "\n")
    say(json.dumps(found))
    return 0
