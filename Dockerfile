# NRT's images: one per device, for every NRT service (the command picks the service).
#
#   docker build --target runtime -t nrt:latest .        the CPU image (what docker-compose.yml builds)
#   docker build --target runtime-cuda -t nrt:cuda .     NVIDIA CUDA 13 + cuDNN 9 with onnxruntime-gpu (compose profile gpu)
#
# The runtime images hold the services' dependencies and the prepared models only, and run as the
# unprivileged user nrt (uid 10001). The models are converted to ONNX in the build stage, with the
# export tools (torch, transformers, optimum) and the dev tools, none of which reach a runtime image:
# only the converted models are copied over. The CPU stages come first, so that the classic builder
# (which builds every stage before the target) never needs the CUDA base for the CPU image.
#
# Air-gapped builds: every install is pip's, so PIP_FIND_LINKS and PIP_NO_INDEX (build arguments,
# unset by default) point it at a wheelhouse instead of PyPI (scripts/offline-build does).

# Everything installed (dev, export), then the example manifests' catalogue models prepared once.
FROM python:3.11-slim-bookworm AS build
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    NRT_HOME=/var/lib/nrt \
    PYTHON=python3.11 \
    # the CPU build of torch (model export only) lives on PyTorch's own index
    PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
WORKDIR /app
# the project's files, as the install step reads them (the same in every stage; from the context, which
# the classic builder caches by content, where a `FROM scratch` stage of them would miss its cache)
COPY pyproject.toml requirements.lock /app/
COPY scripts/bootstrap /app/scripts/bootstrap
# the dependencies first, in a layer that a change of the code (or README) leaves cached
RUN NRT_DEPENDENCIES_ONLY=1 scripts/bootstrap
COPY README.md alembic.ini /app/
COPY libs /app/libs
COPY services /app/services
COPY migrations /app/migrations
COPY manifests /app/manifests
# The same install step as the README's commands (scripts/up and scripts/test run it): NRT itself now.
RUN scripts/bootstrap
RUN .venv/bin/nrt models prepare minilm-l6 && .venv/bin/nrt models prepare gemma3-270m

# The services on CPUs (the compose file's target).
FROM python:3.11-slim-bookworm AS runtime
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    NRT_HOME=/var/lib/nrt \
    PYTHON=python3.11 \
    # the runtime alone, with the CPU build of ONNX Runtime
    NRT_EXTRAS=""
WORKDIR /app
COPY pyproject.toml requirements.lock /app/
COPY scripts/bootstrap /app/scripts/bootstrap
# the dependencies first, in a layer that a change of the code (or README) leaves cached
RUN NRT_DEPENDENCIES_ONLY=1 scripts/bootstrap
COPY README.md alembic.ini /app/
COPY libs /app/libs
COPY services /app/services
COPY migrations /app/migrations
COPY manifests /app/manifests
RUN scripts/bootstrap
# the unprivileged user the services run as; NRT_HOME is its, the models (copied below) and the code
# stay root's, so the code is compiled here (else every process, health checks too, compiles it again)
RUN .venv/bin/python -m compileall -q libs services \
    && groupadd --system --gid 10001 nrt \
    && useradd --system --uid 10001 --gid nrt --home-dir /var/lib/nrt --no-create-home --shell /usr/sbin/nologin nrt \
    && mkdir -p /var/lib/nrt/outbox && chown -R nrt:nrt /var/lib/nrt
COPY --from=build /var/lib/nrt/models /var/lib/nrt/models
COPY deploy/image/healthcheck /usr/local/bin/nrt-healthcheck
ENV PATH=/app/.venv/bin:$PATH
USER nrt
HEALTHCHECK --interval=10s --timeout=15s --start-period=30s --retries=10 CMD ["nrt-healthcheck"]
CMD ["nrt", "--help"]

# The same models plus the causal models' CUDA variants (fp16 weights, in models/NAME/cuda/), built
# offline on the build stage's CPU for the CUDA image only (the CPU image does not carry them).
FROM build AS build-cuda
RUN .venv/bin/nrt models prepare gemma3-270m --provider cuda

# The services on NVIDIA GPUs: CUDA 13 and cuDNN 9 (what onnxruntime-gpu 1.31 is built against) from
# the base image, the driver from the host (the NVIDIA container toolkit), Ubuntu 24.04's Python 3.12.
FROM nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04 AS runtime-cuda
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    NRT_HOME=/var/lib/nrt \
    PYTHON=python3 \
    # the runtime alone, with the GPU build of ONNX Runtime (and nvidia-ml-py, which measures the GPU)
    NRT_GPU=1 \
    NRT_EXTRAS=""
WORKDIR /app
COPY pyproject.toml requirements.lock /app/
COPY scripts/bootstrap /app/scripts/bootstrap
# the dependencies first, in a layer that a change of the code (or README) leaves cached
RUN NRT_DEPENDENCIES_ONLY=1 scripts/bootstrap
COPY README.md alembic.ini /app/
COPY libs /app/libs
COPY services /app/services
COPY migrations /app/migrations
COPY manifests /app/manifests
RUN scripts/bootstrap
# the unprivileged user the services run as; NRT_HOME is its, the models (copied below) and the code
# stay root's, so the code is compiled here (else every process, health checks too, compiles it again)
RUN .venv/bin/python -m compileall -q libs services \
    && groupadd --system --gid 10001 nrt \
    && useradd --system --uid 10001 --gid nrt --home-dir /var/lib/nrt --no-create-home --shell /usr/sbin/nologin nrt \
    && mkdir -p /var/lib/nrt/outbox && chown -R nrt:nrt /var/lib/nrt
COPY --from=build-cuda /var/lib/nrt/models /var/lib/nrt/models
COPY deploy/image/healthcheck /usr/local/bin/nrt-healthcheck
ENV PATH=/app/.venv/bin:$PATH
USER nrt
HEALTHCHECK --interval=10s --timeout=15s --start-period=30s --retries=10 CMD ["nrt-healthcheck"]
CMD ["nrt", "--help"]
