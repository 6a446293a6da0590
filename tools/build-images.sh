#!/usr/bin/env bash
# Builds the dracpu images with no network inside the build: every Python package comes from
# wheels prepared here on the host, downloaded from PyPI at the versions of constraints.txt.
#
#   tools/build-images.sh wheels   downloads the wheels into the cache (keyed by the hash of
#                                  constraints.txt and the target Python), copies them into
#                                  .wheels/ (the build context's copy), prints the cache folder
#   tools/build-images.sh build    wheels, then builds the five service images and the compose
#                                  dev image with `docker build --network none`, each a target
#                                  of the one Dockerfile: they share the layers below their own
#   tools/build-images.sh key      prints a hash of everything the images are built from
#
# Environment: BASE_IMAGE (default: the Dockerfile's, its one pin; any Debian-based image with
# python3 of PYTHON_VERSION), PYTHON_VERSION (3.11), TAG (the release version, pyproject.toml's),
# SERVICES (default: all five and dev), DOCKER (default docker). The classic builder is used
# (DOCKER_BUILDKIT=0): nothing is fetched from a registry but the base image, when absent.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
source "$HERE/lib.sh"

BASE_IMAGE="${BASE_IMAGE:-$(sed -n 's/^ARG BASE_IMAGE=//p' "$ROOT/Dockerfile")}"
PYTHON_VERSION="${PYTHON_VERSION:-3.11}"
DOCKER="${DOCKER:-docker}"
TAG="${TAG:-$(project_version)}"
SERVICES="${SERVICES:-topology allocator dra-plugin nri-plugin api dev}"
# manylinux tags a Debian bookworm (glibc 2.36) interpreter accepts.
PLATFORMS=(manylinux2014_x86_64)
for minor in $(seq 17 36); do PLATFORMS+=("manylinux_2_${minor}_x86_64"); done

LOG_PREFIX=build-images

# The distribution's own dependency ranges (pyproject.toml's [project] dependencies).
runtime_requirements() {
    sed -n '/^dependencies = \[/,/^\]/p' "$ROOT/pyproject.toml" | grep -oE '^ +"[^"]+"' | tr -d ' "'
}

wheels_dir() {
    local key
    key="$( { cat "$ROOT/constraints.txt"; runtime_requirements; echo "python $PYTHON_VERSION x86_64"; } \
        | sha256sum | cut -c1-12)"
    cache_dir wheels "py$PYTHON_VERSION-$key"
}

cmd_wheels() {
    local dir; dir="$(wheels_dir)"
    if [[ -f "$dir/.complete" ]]; then
        say "wheels cached in $dir"
    else
        rm -rf "$dir"; mkdir -p "$dir"
        say "downloading the wheels of constraints.txt for Python $PYTHON_VERSION into $dir"
        local platform_args=()
        for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
        local pip="${PIP:-python3 -m pip}"
        [[ -n "${PIP:-}" || ! -x "$ROOT/.venv/bin/python" ]] || pip="$ROOT/.venv/bin/python -m pip"
        # The runtime dependencies and the build tools with everything they need, at the
        # versions of constraints.txt, as wheels for the target interpreter: no sdist is ever
        # built inside an image.
        # shellcheck disable=SC2046
        $pip download --quiet --disable-pip-version-check --only-binary=:all: \
            --python-version "$PYTHON_VERSION" --implementation cp "${platform_args[@]}" \
            --dest "$dir" -c "$ROOT/constraints.txt" \
            $(runtime_requirements) pip setuptools wheel grpcio-tools
        touch "$dir/.complete"
        say "$(find "$dir" -name '*.whl' | wc -l) wheels, $(du -sm "$dir" | cut -f1) MB"
    fi
    # The build context's copy (ignored by git); refreshed when the wheel set changes.
    local context="$ROOT/.wheels"
    if [[ "$(cat "$context/.source" 2>/dev/null)" != "$dir" ]]; then
        rm -rf "$context"; mkdir -p "$context"
        cp "$dir"/*.whl "$context/"
        printf '%s\n' "$dir" > "$context/.source"
    fi
    printf '%s\n' "$dir"
}

# Files the images are built from (what .dockerignore admits), hashed with their paths.
cmd_key() {
    (
        cd "$ROOT"
        find Dockerfile pyproject.toml setup.py MANIFEST.in README.md constraints.txt .dockerignore \
            tools/genproto.py proto services dev -type f \
            ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path 'services/core/dracpu/pb/*/*' \
            ! -name '.generated' -print0 | sort -z | xargs -0 sha256sum
        echo "base $BASE_IMAGE python $PYTHON_VERSION tag $TAG"
    ) | sha256sum | cut -c1-16
}

cmd_build() {
    cmd_wheels >/dev/null
    local base_size
    base_size="$($DOCKER image inspect -f '{{.Size}}' "$BASE_IMAGE" 2>/dev/null || echo 0)"
    cd "$ROOT"
    local logs; logs="$(mktemp -d "${TMPDIR:-/tmp}/build-images.XXXXXX")"
    # The layers every image shares (target runtime), tagged so they can be inspected; the
    # images below reuse them from the build cache.
    for svc in runtime $SERVICES; do
        local image="localhost/dracpu-$svc:$TAG" start=$SECONDS
        say "building $image (target $svc of the Dockerfile) on $BASE_IMAGE"
        if ! DOCKER_BUILDKIT=0 $DOCKER build --quiet --network none --target "$svc" \
            --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg VERSION="$TAG" \
            --build-arg REVISION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
            -f Dockerfile -t "$image" . > "$logs/$svc.log" 2>&1; then
            tail -20 "$logs/$svc.log" >&2
            echo "build-images: building $image failed (log: $logs/$svc.log)" >&2
            exit 1
        fi
        local size; size="$($DOCKER image inspect -f '{{.Size}}' "$image")"
        say "$image built in $((SECONDS - start)) s: $(( (size - base_size) / 1000000 )) MB above the base"
    done
    rm -rf "$logs"
}

case "${1:-}" in
    wheels) cmd_wheels ;;
    build) cmd_build ;;
    key) cmd_key ;;
    *) echo "usage: $0 wheels|build|key" >&2; exit 2 ;;
esac
