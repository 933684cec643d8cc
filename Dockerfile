# One image for every NRT service; the command picks the service.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NRT_HOME=/var/lib/nrt \
    PYTHON=python3.11 \
    # the CPU build of torch (model export only) lives on PyTorch's own index
    PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu

WORKDIR /app
COPY pyproject.toml requirements.lock README.md alembic.ini ./
COPY scripts scripts
COPY libs libs
COPY services services
COPY migrations migrations
COPY manifests manifests

# The same install step as the README's commands (scripts/up and scripts/test run it).
RUN scripts/bootstrap

ENV PATH=/app/.venv/bin:$PATH
VOLUME ["/var/lib/nrt"]
CMD ["nrt", "--help"]
