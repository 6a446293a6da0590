# Every dracpu image, one target each: topology, allocator, dra-plugin, nri-plugin, api, and the
# compose stack's dev image (dev). Build from the repository root, after tools/build-images.sh
# has prepared the wheels in .wheels/ (the build needs no network: `docker build --network none`
# works); each image is versioned and tagged on its own:
#   tools/build-images.sh wheels
#   docker build --network none --target allocator --build-arg VERSION=0.2.0 \
#     -t localhost/dracpu-allocator:0.2.0 .
#
# The images share their lower layers: the base image (the interpreter), one layer that removes
# the base's package installer and adds the dracpu user, and one layer holding the Python
# packages of all five services, byte-identical in every image. On a node the five containers
# therefore map the same files (gRPC's, protobuf's and pydantic's libraries among them), and
# the page cache holds them once. Above those, each target adds only its own small layer: the
# shared core and that one service (a wheel of its own, nothing of the other services), its
# entry point and its few folders.
#
# BASE_IMAGE: any Debian-based image whose python3 is the one the wheels are for (3.11); the
# one place that pins it (tools/build-images.sh and compose read it from here).
ARG BASE_IMAGE=python:3.11.14-slim-bookworm
ARG VERSION=0.3.0.dev0
ARG REVISION=unknown

# ---- build: the build tools, the shared environment, and one wheel per image ----------------
FROM ${BASE_IMAGE} AS build
# Offline, and at the versions of constraints.txt: pip sees only the wheels copied in.
ENV PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/wheels \
    PIP_CONSTRAINT=/src/constraints.txt \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY .wheels/ /wheels/
COPY constraints.txt ./
# The build tools get a venv of their own, pip running from its wheel (the base need not carry
# pip).
RUN python3 -m venv --without-pip /opt/tools \
    && set -- /wheels/pip-*.whl \
    && /opt/tools/bin/python "$1/pip" install pip setuptools wheel grpcio-tools
# The shared runtime environment, with no pip of its own: the third-party packages of all five
# services (versions from constraints.txt), kept as byte code only (compiled in place, sources
# dropped: a third of the size). It changes only with the wheels, so every image takes the very
# same layer from here, across services and source changes. The kubernetes client's asyncio
# twin (kubernetes.aio, 68 MB of sources) and the aiohttp stack only it imports are left out:
# the dra-plugin uses the client's synchronous half from a thread pool.
RUN python3 -m venv --without-pip /opt/dracpu \
    && /opt/tools/bin/pip --python /opt/dracpu/bin/python install --no-compile \
        grpcio \
        grpcio-health-checking \
        protobuf \
        pydantic \
        PyYAML \
        prometheus-client \
        fastapi \
        uvicorn \
        httpx \
        kubernetes \
    && /opt/tools/bin/pip --python /opt/dracpu/bin/python uninstall --yes \
        aiohttp aiohttp-retry aiohappyeyeballs aiosignal attrs frozenlist multidict propcache yarl \
    && rm -rf /opt/dracpu/lib/python3*/site-packages/kubernetes/aio \
    && /opt/dracpu/bin/python -m compileall -q -b -j 0 /opt/dracpu/lib \
    && find /opt/dracpu/lib -name '*.py' -delete

FROM build AS dist
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY tools/genproto.py tools/genproto.py
COPY proto/ proto/
COPY services/ services/
COPY dev/ dev/
# One wheel per image, built from a copy of the tree holding the shared core and that service
# only (setup.py packages the service folders present; dev: the whole distribution with the
# simulators), so it holds dracpu.core, dracpu.pb and that service, and declares only their
# `dracpu` subcommands (entry points dracpu.commands). Each is installed without
# its dependencies into /stage/<image> (pip --root: its files under /stage/<image>/opt/dracpu),
# with its sources and their byte code: all is compiled here, so the read-only root filesystem
# costs no start-up time. Only the image's own console scripts stay.
RUN for image in topology allocator dra-plugin nri-plugin api dev; do \
        tree="/tree/$image" \
        && mkdir -p "$tree/services" "$tree/tools" \
        && cp -a pyproject.toml setup.py MANIFEST.in README.md proto "$tree/" \
        && cp -a tools/genproto.py "$tree/tools/" \
        && cp -a services/core "$tree/services/" \
        && if [ "$image" = dev ]; then cp -a services dev "$tree/"; \
           else cp -a "services/$image" "$tree/services/"; fi \
        && /opt/tools/bin/pip wheel --no-deps --no-build-isolation --wheel-dir "/dist/$image" "$tree" \
        && /opt/tools/bin/pip --python /opt/dracpu/bin/python install --no-deps \
            --root "/stage/$image" "/dist/$image"/*.whl \
        && case "$image" in \
            dev) ;; \
            topology) find "/stage/$image/opt/dracpu/bin" -name 'dracpu-*' \
                ! -name dracpu-topology ! -name dracpu-gatherinfo -delete ;; \
            *) find "/stage/$image/opt/dracpu/bin" -name 'dracpu-*' ! -name "dracpu-$image" -delete ;; \
           esac \
        || exit 1; \
    done

# ---- runtime: the layers every image shares ---------------------------------------------------
FROM ${BASE_IMAGE} AS runtime
# MALLOC_ARENA_MAX=2: glibc's malloc keeps at most two arenas (gRPC's threads would each get
# one, 64 MB of address space and their own free lists); the services allocate from the event
# loop's thread and a few gRPC threads.
ENV PATH=/opt/dracpu/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2
# No package installer in the image (the base's pip, setuptools and ensurepip go); uid/gid
# 65532 is the non-root identity of every dracpu image; /run/dracpu holds the sockets.
RUN rm -rf /usr/local/bin/pip* /usr/local/lib/python3*/ensurepip \
        /usr/local/lib/python3*/site-packages/pip* /usr/local/lib/python3*/site-packages/setuptools* \
        /usr/local/lib/python3*/site-packages/_distutils_hack /usr/local/lib/python3*/site-packages/wheel* \
        /usr/local/lib/python3*/site-packages/distutils-precedence.pth \
    && echo 'dracpu:x:65532:65532:dracpu:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'dracpu:x:65532:' >> /etc/group \
    && install -d -o 65532 -g 65532 -m 0770 /run/dracpu
COPY --from=build /opt/dracpu /opt/dracpu

# ---- one target per image: its own wheel, entry point and labels ----------------------------
FROM runtime AS topology
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="dracpu-topology" \
      org.opencontainers.image.description="dra.cpu topology service: the node's CPU inventory, read from sysfs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.dracpu.service="topology" \
      io.dracpu.api-version="dracpu.topology.v1"
ENV DRACPU_IMAGE_VERSION=${VERSION}
COPY --from=dist /stage/topology/ /
# /dracpu and /dracpu-gatherinfo: the paths the reference driver's image has, so
# `kubectl exec <pod> -- /dracpu gatherinfo --stdout` works here too (this is the pod's
# default container).
RUN ln -s /opt/dracpu/bin/dracpu /dracpu \
    && ln -s /opt/dracpu/bin/dracpu-gatherinfo /dracpu-gatherinfo
# Runs as a non-root user: it only reads /sys (world-readable) and writes its socket.
USER 65532:65532
HEALTHCHECK --interval=30s --timeout=5s CMD ["dracpu", "health", "--live", "--socket", "/run/dracpu/topology.sock"]
ENTRYPOINT ["dracpu-topology"]
# A broken image is never tagged: the build ends by starting the entry point.
RUN dracpu-topology --help > /dev/null && /dracpu gatherinfo --help > /dev/null \
    && /dracpu-gatherinfo --help > /dev/null

FROM runtime AS allocator
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="dracpu-allocator" \
      org.opencontainers.image.description="dra.cpu allocator service: the node's CPU allocation state, checkpoint and CDI specs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.dracpu.service="allocator" \
      io.dracpu.api-version="dracpu.allocator.v1"
ENV DRACPU_IMAGE_VERSION=${VERSION}
COPY --from=dist /stage/allocator/ /
RUN install -d -o 65532 -g 65532 -m 0755 /var/lib/dracpu /var/run/cdi
# Runs as a non-root user by default, which is enough for `dracpu simulate` and for state
# and CDI dirs it owns (docker compose). On a node the chart runs it as uid 0, with no
# capabilities, because the host's CDI dir and its state dir are owned by root.
USER 65532:65532
HEALTHCHECK --interval=30s --timeout=5s CMD ["dracpu", "health", "--live", "--socket", "/run/dracpu/allocator.sock"]
ENTRYPOINT ["dracpu-allocator"]
# A broken image is never tagged: the build ends by starting the entry point.
RUN dracpu-allocator --help > /dev/null

FROM runtime AS dra-plugin
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="dracpu-dra-plugin" \
      org.opencontainers.image.description="dra.cpu dra-plugin service: kubelet DRA plugin and ResourceSlice publisher" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.dracpu.service="dra-plugin" \
      io.dracpu.api-version="dracpu.dra_plugin.v1"
ENV DRACPU_IMAGE_VERSION=${VERSION}
COPY --from=dist /stage/dra-plugin/ /
# Stays root (uid 0; the chart drops every capability): it creates its sockets in the
# kubelet's root-owned plugins and plugins_registry dirs and writes to the CDI dir.
HEALTHCHECK --interval=30s --timeout=5s CMD ["dracpu", "health", "--live", "--socket", "/run/dracpu/dra-plugin.sock"]
ENTRYPOINT ["dracpu-dra-plugin"]
# A broken image is never tagged: the build ends by starting the entry point.
RUN dracpu-dra-plugin --help > /dev/null

FROM runtime AS nri-plugin
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="dracpu-nri-plugin" \
      org.opencontainers.image.description="dra.cpu nri-plugin service: pins container cpusets through the runtime's NRI socket" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.dracpu.service="nri-plugin" \
      io.dracpu.api-version="dracpu.nri_plugin.v1"
ENV DRACPU_IMAGE_VERSION=${VERSION}
COPY --from=dist /stage/nri-plugin/ /
# Stays root (uid 0; the chart drops every capability): the runtime's NRI socket is
# owned by root with mode 0600.
HEALTHCHECK --interval=30s --timeout=5s CMD ["dracpu", "health", "--live", "--socket", "/run/dracpu/nri-plugin.sock"]
ENTRYPOINT ["dracpu-nri-plugin"]
# A broken image is never tagged: the build ends by starting the entry point.
RUN dracpu-nri-plugin --help > /dev/null

FROM runtime AS api
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="dracpu-api" \
      org.opencontainers.image.description="dra.cpu api service: read-only HTTP view of the node's CPU allocations" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.dracpu.service="api" \
      io.dracpu.api-version="dracpu.api.v1"
ENV DRACPU_IMAGE_VERSION=${VERSION}
COPY --from=dist /stage/api/ /
# Runs as a non-root user: it only reads the other services over their sockets.
USER 65532:65532
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s CMD ["dracpu", "health", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["dracpu-api"]
# A broken image is never tagged: the build ends by starting the entry point.
RUN dracpu-api --help > /dev/null

# The development image of docker compose: the whole distribution, the simulators in
# dracpu.dev included. It runs the simulated kubelet and runtime, prepares the run folder and
# holds the `dracpu` CLI the compose stack's claims are made with; the five services run from
# their own images.
FROM runtime AS dev
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="dracpu-dev" \
      org.opencontainers.image.description="dra.cpu development image: simulators and the dracpu CLI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=dist /stage/dev/ /
USER 65532:65532
ENTRYPOINT ["dracpu"]
RUN dracpu --help > /dev/null
