#!/usr/bin/env bash
# The real-node tier: the services against a genuine containerd 2.x + runc, driven with crictl.
#   tools/tier-realnode.sh bootstrap
# builds containerd (every CONTAINERD_VERSIONS entry, with shim and ctr), crictl and the CNI
# plugins the big-node guest's pod network uses (bridge, host-local, loopback) from their Go
# modules (tools/build-containerd.sh; instant when cached), installs runc and busybox-static from
# Debian, and makes the test image into the cache:
#   ${DRACPU_CACHE}/realnode-image-<n>/{pause,busybox-pause.tar}
# busybox-static plus a static pause binary, as an OCI archive `ctr images import` reads; the
# same image is the sandbox image. It also builds CRI-O and installs conmon (tools/build-crio.sh),
# the runtime of the tests' second pass (tools/run-tests.sh). Not root, or apt/go missing: one line saying why, exit 0; the
# tests then skip with their own reason.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE_VERSION=1  # bump when pause.c or the image layout changes
PREFIX=tier-realnode

bootstrap() {
    if [[ $(id -u) -ne 0 ]]; then
        echo "$PREFIX: not root; the real-node tier needs root (runc, cgroups, mounts); skipped"
        return 0
    fi
    local cached=1 v
    for v in ${CONTAINERD_VERSIONS:-v2.4.2 v2.3.7}; do cache_ready containerd "$v" || cached=0; done
    cache_ready crictl "${CRICTL_VERSION:-v1.37.0}" || cached=0
    cache_ready cni-plugins "${CNI_PLUGINS_VERSION:-v1.10.0}" || cached=0
    if ((cached)); then
        log "$PREFIX" "containerd, crictl and the CNI plugins cached in $DRACPU_CACHE"
    elif ! command -v go >/dev/null 2>&1; then
        echo "$PREFIX: go not found on PATH or in /usr/local/go/bin; real-node tier skipped"
        return 0
    else
        log "$PREFIX" "containerd, crictl and the CNI plugins (tools/build-containerd.sh)"
        bash "$ROOT/tools/build-containerd.sh"
    fi

    local missing=()
    [[ -x /usr/sbin/runc ]] || missing+=(runc)
    [[ -x /bin/busybox ]] || missing+=(busybox-static)
    command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
    if ((${#missing[@]})); then
        if ! command -v apt-get >/dev/null 2>&1; then
            echo "$PREFIX: needs ${missing[*]} and apt-get is missing; real-node tier skipped"
            return 0
        fi
        log "$PREFIX" "apt-get install ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null ||
            { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; }
    fi
    if ! /bin/busybox --list 2>/dev/null | grep -qx sleep || ! { ldd /bin/busybox 2>&1 || true; } | grep -q "not a dynamic"; then
        echo "$PREFIX: /bin/busybox is not a static busybox (install busybox-static)" >&2
        return 1
    fi

    # The second runtime: `make test` runs this tier and one cluster scenario on CRI-O too.
    log "$PREFIX" "CRI-O and conmon (tools/build-crio.sh)"
    bash "$ROOT/tools/build-crio.sh"

    if cache_ready realnode-image "$IMAGE_VERSION"; then
        log "$PREFIX" "test image cached in $(cache_dir realnode-image "$IMAGE_VERSION")"
        return 0
    fi
    local dir
    dir="$(cache_dir realnode-image "$IMAGE_VERSION")"
    rm -rf "$dir"; mkdir -p "$dir"
    log "$PREFIX" "building the static pause and the busybox+pause image into $dir"
    gcc -Os -static -o "$dir/pause" "$ROOT/tests/realnode/image/pause.c"
    python3 "$ROOT/tests/realnode/image/mkimage.py" "$dir/busybox-pause.tar" \
        --pause "$dir/pause" --busybox /bin/busybox
    touch "$dir/.complete"
    log "$PREFIX" "ready"
}

case "${1:-}" in
    bootstrap) bootstrap ;;
    *) echo "usage: $0 bootstrap" >&2; exit 2 ;;
esac
