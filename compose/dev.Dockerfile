# syntax=docker/dockerfile:1
# The development image of docker compose: the whole distribution, the simulators in
# dracpu.dev included. It runs the simulated kubelet and runtime and prepares the run folder;
# the five services run from their own images.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN pip install "grpcio-tools>=1.66,<2" "setuptools>=77" wheel
COPY pyproject.toml setup.py README.md ./
COPY tools/genproto.py tools/genproto.py
COPY proto/ proto/
COPY services/ services/
COPY dev/ dev/
RUN python tools/genproto.py \
    && pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .
RUN python -m venv /opt/dracpu \
    && /opt/dracpu/bin/pip install /wheels/*.whl \
    && /opt/dracpu/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="dracpu-dev" \
      org.opencontainers.image.description="dra.cpu development image: simulators and the dracpu CLI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/dracpu/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/dracpu /opt/dracpu
RUN groupadd --system --gid 65532 dracpu \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin dracpu
USER 65532:65532
ENTRYPOINT ["dracpu"]
