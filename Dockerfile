# One image for the webhook, the reconciler, the housekeeper and the console; the chart picks the
# service with `python -m torchjob.<service>`.
#
#   docker build -t torchjob:0.1.0 .
#
# PYTHON_IMAGE is any image with Python 3.11 and its venv module at /usr/bin or /usr/local/bin:
# python:3.11-slim, or Debian bookworm with python3-venv and python-is-python3 (`make node-up`
# builds one with debootstrap).
ARG PYTHON_IMAGE=python:3.11-slim

# Builds the wheel and installs it with its dependencies into a virtual environment. Every
# dependency ships binary wheels for this platform, so no compiler is needed here either.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY services ./services
RUN python -m venv /opt/torchjob \
 && /opt/torchjob/bin/pip install --only-binary=:all: --upgrade pip \
 && /opt/torchjob/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/torchjob/bin/pip install --only-binary=:all: /wheels/*.whl \
 && /opt/torchjob/bin/pip uninstall --yes pip

# The runtime: the interpreter, the virtual environment and nothing else; no pip, no compiler.
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="torchjob" \
      org.opencontainers.image.description="Runs PyTorch distributed training jobs on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
# The base image's own pip and setuptools are not needed at run time either. This runs before PATH
# puts the virtual environment first, so `python` is the base image's interpreter (the venv's has
# no pip); a base without pip (Debian's python3) has nothing to remove.
RUN if python -m pip --version >/dev/null 2>&1; then \
      python -m pip uninstall --yes --disable-pip-version-check pip setuptools wheel; \
    fi
ENV PATH=/opt/torchjob/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/torchjob /opt/torchjob
# A numeric user, so that runAsNonRoot can verify it; the chart runs as the same uid.
USER 65532:65532
WORKDIR /tmp
EXPOSE 9443 8080
CMD ["python", "-m", "torchjob.webhook"]
