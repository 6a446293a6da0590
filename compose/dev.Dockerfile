# The development image of docker compose: the whole distribution, the simulators in
# dracpu.dev included. It runs the simulated kubelet and runtime, prepares the run folder and
# holds the `dracpu` CLI the compose stack's claims are made with; the five services run from
# their own images. Built like them, offline from the wheels in .wheels/ (tools/build-images.sh).
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/wheels \
    PIP_CONSTRAINT=/src/constraints.txt \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY .wheels/ /wheels/
COPY constraints.txt ./
RUN python3 -m venv --without-pip /opt/tools \
    && set -- /wheels/pip-*.whl \
    && /opt/tools/bin/python "$1/pip" install pip setuptools wheel grpcio-tools
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY tools/genproto.py tools/genproto.py
COPY proto/ proto/
COPY services/ services/
COPY dev/ dev/
RUN /opt/tools/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /dist . \
    && python3 -m venv --without-pip /opt/dracpu \
    && /opt/tools/bin/pip --python /opt/dracpu/bin/python install /dist/*.whl

FROM ${BASE_IMAGE}
ARG VERSION=0.2.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="dracpu-dev" \
      org.opencontainers.image.description="dra.cpu development image: simulators and the dracpu CLI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/dracpu/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/dracpu /opt/dracpu
RUN rm -rf /usr/local/bin/pip* /usr/local/lib/python3*/ensurepip \
        /usr/local/lib/python3*/site-packages/pip* /usr/local/lib/python3*/site-packages/setuptools* \
        /usr/local/lib/python3*/site-packages/_distutils_hack /usr/local/lib/python3*/site-packages/wheel* \
        /usr/local/lib/python3*/site-packages/distutils-precedence.pth \
    && echo 'dracpu:x:65532:65532:dracpu:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'dracpu:x:65532:' >> /etc/group
USER 65532:65532
ENTRYPOINT ["dracpu"]
RUN dracpu --help > /dev/null
