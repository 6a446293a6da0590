#!/usr/bin/env bash
# The control-plane tier: a real kube-apiserver, kube-scheduler and kube-controller-manager
# (tools/controlplane.sh) on loopback, against which tests/controlplane/ runs the dra-plugin.
#   tools/tier-controlplane.sh bootstrap   build etcd and the Kubernetes binaries into the cache
#                                          (tools/build-kubernetes.sh; instant when cached): the
#                                          newest release of tools/kubernetes-versions whole, and
#                                          kube-apiserver and kube-scheduler of the oldest, on
#                                          which `make test` runs the compat checks again
# Tools it cannot get (no Go to build with, no openssl or curl) are named in one line, exit 0;
# the tests then skip saying the same.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"
source "$here/kubernetes-versions.sh"
KUBE_VERSION="${KUBE_VERSION:-$(kube_newest)}"
KUBE_OLDEST="$(kube_oldest)"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
OLDEST_BINARIES="kube-apiserver kube-scheduler"

# oldest_ready: the oldest release's two binaries are in the cache.
oldest_ready() {
    local b
    for b in $OLDEST_BINARIES; do
        [[ -x "$(cache_dir kubernetes "$KUBE_OLDEST")/bin/$b" ]] || return 1
    done
}

bootstrap() {
    local tool
    for tool in openssl curl; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "tier-controlplane: $tool not installed; the control-plane tests will skip"
            return 0
        fi
    done
    if cache_ready kubernetes "$KUBE_VERSION" && cache_ready etcd "$ETCD_VERSION" && oldest_ready; then
        log tier-controlplane "kubernetes $KUBE_VERSION, $KUBE_OLDEST and etcd $ETCD_VERSION cached in $DRACPU_CACHE"
        return 0
    fi
    if ! command -v go >/dev/null 2>&1; then
        echo "tier-controlplane: go not found and the binaries are not cached; the control-plane tests will skip"
        return 0
    fi
    log tier-controlplane "building kubernetes $KUBE_VERSION and etcd $ETCD_VERSION (cold: ~15 min on 2 cores)"
    KUBE_VERSION="$KUBE_VERSION" bash "$here/build-kubernetes.sh" all
    if [[ "$KUBE_OLDEST" != "$KUBE_VERSION" ]]; then
        log tier-controlplane "building $OLDEST_BINARIES $KUBE_OLDEST (cold: 7 min of CPU, 4-20 min on 2 cores by their load)"
        KUBE_VERSION="$KUBE_OLDEST" KUBE_BINARIES="$OLDEST_BINARIES" bash "$here/build-kubernetes.sh" kube
    fi
}

case "${1:-}" in
    bootstrap) bootstrap ;;
    *) echo "usage: tier-controlplane.sh bootstrap" >&2; exit 2 ;;
esac
