#!/usr/bin/env bash
# Builds the real-node peers from their Go modules into the cache outside the clone:
#   containerd-<v>/bin/{containerd,containerd-shim-runc-v2,ctr} for every CONTAINERD_VERSIONS entry
#   crictl-<v>/bin/crictl
#   cni-plugins-<v>/bin/{bridge,host-local,loopback} (the big-node guest's pod network)
# Prints the cache directories it made ready. Cold: ~12 min for the first containerd on 2 cores,
# ~1-3 min for each further one (shared Go build cache), ~4 min crictl. Warm: instant.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CONTAINERD_VERSIONS="${CONTAINERD_VERSIONS:-v2.4.2 v2.3.7}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.10.0}"
need_go build-containerd

for v in $CONTAINERD_VERSIONS; do
    if cache_ready containerd "$v"; then
        log build-containerd "containerd $v cached in $(cache_dir containerd "$v")"
        continue
    fi
    dir="$(cache_dir containerd "$v")"
    rm -rf "$dir"; mkdir -p "$dir/bin"
    log build-containerd "building containerd $v (+ shim, ctr) into $dir"
    GOBIN="$dir/bin" GOFLAGS="-buildvcs=false" go install \
        -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$v" \
        "github.com/containerd/containerd/v2/cmd/containerd@$v" \
        "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$v" \
        "github.com/containerd/containerd/v2/cmd/ctr@$v"
    cache_seal containerd "$v"
    log build-containerd "containerd $v done"
done

if cache_ready crictl "$CRICTL_VERSION"; then
    log build-containerd "crictl $CRICTL_VERSION cached"
else
    dir="$(cache_dir crictl "$CRICTL_VERSION")"
    rm -rf "$dir"; mkdir -p "$dir/bin"
    log build-containerd "building crictl $CRICTL_VERSION into $dir"
    GOBIN="$dir/bin" GOFLAGS="-buildvcs=false" go install -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
        "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
    cache_seal crictl "$CRICTL_VERSION"
    log build-containerd "crictl done"
fi

if cache_ready cni-plugins "$CNI_PLUGINS_VERSION"; then
    log build-containerd "CNI plugins $CNI_PLUGINS_VERSION cached"
else
    dir="$(cache_dir cni-plugins "$CNI_PLUGINS_VERSION")"
    rm -rf "$dir"; mkdir -p "$dir/bin"
    log build-containerd "building the CNI plugins bridge, host-local, loopback $CNI_PLUGINS_VERSION into $dir"
    module=github.com/containernetworking/plugins
    GOBIN="$dir/bin" GOFLAGS="-buildvcs=false" go install -ldflags "-s -w" \
        "$module/plugins/main/bridge@$CNI_PLUGINS_VERSION" \
        "$module/plugins/ipam/host-local@$CNI_PLUGINS_VERSION" \
        "$module/plugins/main/loopback@$CNI_PLUGINS_VERSION"
    cache_seal cni-plugins "$CNI_PLUGINS_VERSION"
    log build-containerd "CNI plugins done"
fi
