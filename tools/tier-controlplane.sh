#!/usr/bin/env bash
# The control-plane tier: a real kube-apiserver, kube-scheduler and kube-controller-manager
# (tools/controlplane.sh) on loopback, against which tests/controlplane/ runs the dra-plugin.
#   tools/tier-controlplane.sh bootstrap   build etcd and the Kubernetes binaries into the cache
#                                          (tools/build-kubernetes.sh; instant when cached)
# Tools it cannot get (no Go to build with, no openssl or curl) are named in one line, exit 0;
# the tests then skip saying the same.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"

bootstrap() {
    local tool
    for tool in openssl curl; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "tier-controlplane: $tool not installed; the control-plane tests will skip"
            return 0
        fi
    done
    if cache_ready kubernetes "$KUBE_VERSION" && cache_ready etcd "$ETCD_VERSION"; then
        log tier-controlplane "kubernetes $KUBE_VERSION and etcd $ETCD_VERSION cached in $DRACPU_CACHE"
        return 0
    fi
    if ! command -v go >/dev/null 2>&1; then
        echo "tier-controlplane: go not found and the binaries are not cached; the control-plane tests will skip"
        return 0
    fi
    log tier-controlplane "building kubernetes $KUBE_VERSION and etcd $ETCD_VERSION (cold: ~15 min on 2 cores)"
    bash "$here/build-kubernetes.sh" all
}

case "${1:-}" in
    bootstrap) bootstrap ;;
    *) echo "usage: tier-controlplane.sh bootstrap" >&2; exit 2 ;;
esac
