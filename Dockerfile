# NRT's images: one per device, for every NRT service (the command picks the service).
#
#   docker build --target runtime .        the CPU image (also the default: the last stage)
#   docker build --target runtime-cuda .   NVIDIA CUDA 13 + cuDNN 9 with onnxruntime-gpu (compose profile gpu)
#
# The runtime images hold the services' dependencies and the prepared models only. The models are
# converted to ONNX in the build stage, with the export tools (torch, transformers, optimum) and the
# dev tools, none of which reach a runtime image: only the converted models are copied over.

# The project's files, as the install step reads them (one list for every stage).
FROM scratch AS source
COPY pyproject.toml requirements.lock README.md alembic.ini /app/
COPY scripts /app/scripts
COPY libs /app/libs
COPY services /app/services
COPY migrations /app/migrations
COPY manifests /app/manifests

# Everything installed (dev, export), then the example manifests' catalogue models prepared once.
FROM python:3.11-slim-bookworm AS build
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NRT_HOME=/var/lib/nrt \
    PYTHON=python3.11 \
    # the CPU build of torch (model export only) lives on PyTorch's own index
    PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
WORKDIR /app
COPY --from=source /app /app
# The same install step as the README's commands (scripts/up and scripts/test run it).
RUN scripts/bootstrap
RUN .venv/bin/nrt models prepare minilm-l6 && .venv/bin/nrt models prepare gemma3-270m

# The same models plus the causal models' CUDA variants (fp16 weights, in models/NAME/cuda/), built
# offline on the build stage's CPU for the CUDA image only (the CPU image does not carry them).
FROM build AS build-cuda
RUN .venv/bin/nrt models prepare gemma3-270m --provider cuda

# The services on NVIDIA GPUs: CUDA 13 and cuDNN 9 (what onnxruntime-gpu 1.31 is built against) from
# the base image, the driver from the host (the NVIDIA container toolkit), Ubuntu 24.04's Python 3.12.
FROM nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04 AS runtime-cuda
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NRT_HOME=/var/lib/nrt \
    PYTHON=python3 \
    # the runtime alone, with the GPU build of ONNX Runtime (and nvidia-ml-py, which measures the GPU)
    NRT_GPU=1 \
    NRT_EXTRAS=""
WORKDIR /app
COPY --from=source /app /app
RUN scripts/bootstrap
COPY --from=build-cuda /var/lib/nrt/models /var/lib/nrt/models
ENV PATH=/app/.venv/bin:$PATH
CMD ["nrt", "--help"]

# The services on CPUs (the default target).
FROM python:3.11-slim-bookworm AS runtime
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NRT_HOME=/var/lib/nrt \
    PYTHON=python3.11 \
    # the runtime alone, with the CPU build of ONNX Runtime
    NRT_EXTRAS=""
WORKDIR /app
COPY --from=source /app /app
RUN scripts/bootstrap
COPY --from=build /var/lib/nrt/models /var/lib/nrt/models
ENV PATH=/app/.venv/bin:$PATH
CMD ["nrt", "--help"]
