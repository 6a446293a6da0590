#!/usr/bin/env bash
# The e2e tier: the chart on a real one-node cluster (tools/cluster.sh), scenarios in tests/e2e.
#   tools/tier-e2e.sh bootstrap
# reuses the other tiers' caches: Kubernetes + etcd (tools/build-kubernetes.sh), containerd,
# crictl, runc and the busybox+pause image (tools/tier-realnode.sh), the five driver images
# (tools/tier-docker.sh images, a docker-save archive) and helm (tools/install-helm.sh); then it
# makes the release the tier installs from (tools/release.sh: dist/'s chart package and image
# archives) and installs Debian's docker-registry, the registry the install steps push to.
# Not root or a piece missing: one line saying why, exit 0; the tests then skip.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX=tier-e2e

bootstrap() {
    if [[ $(id -u) -ne 0 ]]; then
        echo "$PREFIX: not root; the e2e tier needs root (kubelet, runc, cgroups, a bridge); skipped"
        return 0
    fi
    bash "$ROOT/tools/tier-realnode.sh" bootstrap
    # Without Go only what is cached is used; `cluster.sh missing` below names the rest.
    if ! command -v go >/dev/null 2>&1; then
        echo "$PREFIX: go not found; Kubernetes, etcd and helm only from the cache"
    elif [[ -f "$ROOT/tools/build-kubernetes.sh" ]]; then
        log "$PREFIX" "Kubernetes and etcd (tools/build-kubernetes.sh)"
        bash "$ROOT/tools/build-kubernetes.sh"
    fi
    bash "$ROOT/tools/install-helm.sh" --skip-without-go
    log "$PREFIX" "driver images (tools/tier-docker.sh images)"
    bash "$ROOT/tools/tier-docker.sh" bootstrap >&2
    bash "$ROOT/tools/tier-docker.sh" images >/dev/null
    # What the tier installs: the release in dist/ (the chart package and one archive per image).
    log "$PREFIX" "the release in dist/ (tools/release.sh)"
    bash "$ROOT/tools/release.sh" >&2
    # The registry installation.md's first step pushes to: Debian's CNCF Distribution registry.
    if ! command -v docker-registry >/dev/null 2>&1; then
        log "$PREFIX" "installing docker-registry from apt (the local registry of the install steps)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-registry \
            >/dev/null || echo "$PREFIX: apt-get install docker-registry failed; the push step will skip"
    fi
    local reasons
    reasons="$(bash "$ROOT/tools/cluster.sh" missing)"
    if [[ -n "$reasons" ]]; then
        echo "$PREFIX: cluster cannot start: $(echo "$reasons" | paste -sd ';' -); e2e tier skipped"
        return 0
    fi
    log "$PREFIX" "ready"
}

case "${1:-}" in
    bootstrap) bootstrap ;;
    *) echo "$PREFIX: error: usage: tier-e2e.sh bootstrap" >&2; exit 2 ;;
esac
