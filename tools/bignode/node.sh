#!/usr/bin/env bash
# The big-node guest's cluster node across boots: what a node's disk and init system do for its
# containerd and kubelet.
#
#   node.sh up      the image disk (/dev/vda) mounted and the node's persistent folders bound
#                   from it, the node's settings (the DRACPU_CLUSTER_* variables of the
#                   environment, the kubelet's kubeconfig) saved on it, then `tools/cluster.sh
#                   node` with them
#   node.sh boot    at boot (tools/bignode/stage2.sh): when the disk holds a node's saved
#                   settings, the same mounts and `tools/cluster.sh node` with those settings;
#                   nothing to do otherwise
#
# What a reboot keeps is on the disk (qemu keeps a `snapshot=on` disk's writes until it exits,
# across a guest reset): containerd's root with its images and the import stamps (the disk's
# own root, mounted at DIR/containerd), the kubelet's root (node/kubelet, bound at DIR/kubelet:
# its pods, DRA checkpoint and plugin registrations) and the driver's state (node/dracpu, bound
# at /var/lib/dracpu: the claim records). What it loses is on tmpfs, as a node's /run is:
# containerd's state (a tmpfs at DIR/containerd/state), runc's state, the NRI socket, the CDI
# specs in /var/run/cdi and every container.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS="$(dirname "$HERE")"
source "$TOOLS/lib.sh"
LOG_PREFIX=bignode-node

DISK="${DRACPU_BIGNODE_NODE_DISK:-/dev/vda}"
DIR="${DRACPU_CLUSTER_DIR:-/run/dracpu-node}"
STATE_DIR="${DRACPU_BIGNODE_NODE_STATE_DIR:-/var/lib/dracpu}"
SAVED=node  # on the disk: the settings, the kubeconfig and the persistent folders

# mount_disk: the disk at DIR/containerd, containerd's state on a tmpfs beneath it, the kubelet's
# root and the driver's state dir bound from the disk. Each step skipped when already done.
mount_disk() {
    [[ -b "$DISK" ]] || die "no node disk at $DISK (the guest was booted without one)"
    local root="$DIR/containerd"
    mkdir -p "$root"
    mountpoint -q "$root" || mount -t ext4 -o noatime "$DISK" "$root" || die "mount $DISK at $root"
    mkdir -p "$root/state" "$root/$SAVED/kubelet" "$root/$SAVED/dracpu" "$DIR/kubelet" "$STATE_DIR"
    mountpoint -q "$root/state" || mount -t tmpfs -o mode=0711 tmpfs "$root/state"
    mountpoint -q "$DIR/kubelet" || mount --bind "$root/$SAVED/kubelet" "$DIR/kubelet"
    mountpoint -q "$STATE_DIR" || mount --bind "$root/$SAVED/dracpu" "$STATE_DIR"
}

cmd_up() {
    local saved="$DIR/containerd/$SAVED" kubeconfig="${DRACPU_CLUSTER_NODE_KUBECONFIG:-}" name
    [[ -f "$kubeconfig" ]] || die "up: DRACPU_CLUSTER_NODE_KUBECONFIG names no file ('$kubeconfig')"
    mount_disk
    install -m 0600 "$kubeconfig" "$saved/kubelet.kubeconfig"
    export DRACPU_CLUSTER_NODE_KUBECONFIG="$saved/kubelet.kubeconfig" DRACPU_CLUSTER_DIR="$DIR"
    {
        for name in "${!DRACPU_CLUSTER_@}"; do printf 'export %s=%q\n' "$name" "${!name}"; done
    } >"$saved/settings.env.tmp"
    mv "$saved/settings.env.tmp" "$saved/settings.env"
    sync
    exec bash "$TOOLS/cluster.sh" node
}

cmd_boot() {
    local root="$DIR/containerd" probe
    [[ -b "$DISK" ]] || return 0
    # Only a disk that has been a node's: look without keeping it mounted otherwise.
    probe="$(mktemp -d)"
    if ! mount -t ext4 -o ro,noatime "$DISK" "$probe" 2>/dev/null; then
        rmdir "$probe"
        return 0
    fi
    local found=0
    [[ -f "$probe/$SAVED/settings.env" ]] && found=1
    umount "$probe" && rmdir "$probe"
    ((found)) || return 0
    say "a node's settings on $DISK: starting containerd and the kubelet"
    mount_disk
    # shellcheck disable=SC1090  # written by cmd_up
    source "$root/$SAVED/settings.env"
    exec bash "$TOOLS/cluster.sh" node
}

case "${1:-}" in
    up) cmd_up ;;
    boot) cmd_boot ;;
    *) die "usage: node.sh up|boot" ;;
esac
