#!/usr/bin/env bash
# The big-node tier: a qemu guest (software emulation, TCG) with 8 vCPUs as 2 sockets x 2 cores
# x 2 threads, 2 NUMA nodes and cgroup v2, running containerd + runc and the services of this
# checkout; pytest on the host drives it through a small agent (tests/bignode).
#
#   tools/tier-bignode.sh bootstrap   qemu-system-x86, busybox-static and cpio from Debian; the
#                                     Debian kernel package's decompressed vmlinux and the few
#                                     modules the guest needs; the initramfs. Cached in
#                                     ${DRACPU_CACHE}/bignode-<kernel>-<recipe>/
#   tools/tier-bignode.sh up          boots the guest (qemu by recorded PID) and waits for its agent
#   tools/tier-bignode.sh down        powers the guest off; kills qemu by its PID if it hangs
#   tools/tier-bignode.sh shell       an interactive shell in the guest (its second serial port)
#   tools/tier-bignode.sh status      prints the guest's state folder, agent port and qemu PID
#   tools/tier-bignode.sh check       exits 0 when bootstrap is done, else prints what is missing
#   tools/tier-bignode.sh disk [ARCHIVE...]
#                                     prints the preloaded image disk of the guest's cluster node
#                                     (tools/cluster.sh image-disk: the sandbox and driver images
#                                     of this checkout, and of the ARCHIVEs given, in a containerd
#                                     root) and the driver images' archives, building the disk
#                                     when missing; cached in ${DRACPU_CACHE}/bignode-disk/, the
#                                     newest four kept
#   tools/tier-bignode.sh modules NAME...
#                                     prints the cached guest kernel's modules NAME and those they
#                                     depend on, dependencies first, as paths the guest reads
#                                     (it sees the host's /): what a test loads in the guest
#
# containerd and runc come from the real-node tier (tools/tier-realnode.sh bootstrap). The guest
# sees the host's / read-only over virtio-9p (with a tmpfs overlay: it writes nothing back but
# its state folder), so it runs this checkout and its .venv as they are. Its only link to the
# host is qemu's user-mode network with restrict=on: the agent's port is forwarded from
# 127.0.0.1 on the host, nothing else goes in or out.
# DRACPU_BIGNODE_STATE (default /tmp/dracpu-bignode) holds the PID file, the serial logs, the
# shell socket and the guest's writable folder; DRACPU_BIGNODE_PORT (default 36190) the agent.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
source "$HERE/lib.sh"
LOG_PREFIX=tier-bignode

RECIPE=5  # bump when the initramfs, its init or the module list changes
STATE="${DRACPU_BIGNODE_STATE:-/tmp/dracpu-bignode}"
PORT="${DRACPU_BIGNODE_PORT:-36190}"
GUEST_PORT=7390
PIDFILE="$STATE/qemu.pid"
MARKER="mount_tag=dracpu-host"
# The guest's modules, by name; their dependencies are added from the package's modules.dep.
MODULES="virtio_pci 9pnet_virtio 9p overlay virtio_net virtio_blk crc32c_generic ext4 bridge veth"
CONTAINERD=v2.4.2
KUBERNETES=v1.37.2

skip() { echo "tier-bignode: $*; the bignode tier is skipped"; exit 0; }

kernel_package() {
    # The package linux-image-amd64 depends on: the current stock kernel of this Debian release.
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}

cache_entry() {
    # The newest complete entry (the kernel may have moved on since bootstrap).
    local dir
    for dir in $(ls -d "$DRACPU_CACHE"/bignode-*-r"$RECIPE" 2>/dev/null | sort -rV); do
        [[ -f "$dir/.complete" ]] && { printf '%s\n' "$dir"; return 0; }
    done
    return 1
}

install_debs() {
    local missing=()
    command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
    [[ -x /bin/busybox ]] && { ldd /bin/busybox 2>&1 || true; } | grep -q "not a dynamic" ||
        missing+=(busybox-static)
    command -v cpio >/dev/null 2>&1 || missing+=(cpio)
    ((${#missing[@]})) || { say "qemu-system-x86, busybox-static and cpio installed"; return 0; }
    command -v apt-get >/dev/null 2>&1 || skip "needs ${missing[*]} and apt-get is missing"
    say "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
        >/dev/null 2>&1 || {
        apt-get update -q >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${missing[@]}" >/dev/null 2>&1 || skip "apt-get cannot install ${missing[*]}"
    }
    say "installed ${missing[*]}"
}

# extract_vmlinux BZIMAGE OUT: the kernel's own extract-vmlinux method for an xz payload: find
# the xz stream's magic, decompress from there (trailing bytes are ignored), check it is ELF.
extract_vmlinux() {
    python3 - "$1" "$2" <<'PY'
import lzma, sys
data = open(sys.argv[1], "rb").read()
start = data.find(b"\xfd7zXZ\x00")
while start >= 0:
    try:
        out = lzma.LZMADecompressor().decompress(data[start:])
    except lzma.LZMAError:
        out = b""
    if out[:4] == b"\x7fELF":
        open(sys.argv[2], "wb").write(out)
        break
    start = data.find(b"\xfd7zXZ\x00", start + 1)
else:
    sys.exit(f"no xz-compressed ELF kernel in {sys.argv[1]}")
PY
}

# modules_in_order KROOT KVER NAME...: the .ko paths (relative to the module tree) of NAME and
# everything they depend on, dependencies first. The package ships no modules.dep (depmod makes
# it at install), so each module's own `depends=` field of its .modinfo is read.
modules_in_order() {
    python3 - "$@" <<'PY'
import lzma, re, sys
from pathlib import Path
tree = Path(sys.argv[1]) / "lib/modules" / sys.argv[2]
paths = {}
for path in tree.rglob("*.ko*"):
    paths[path.name.split(".ko")[0].replace("-", "_")] = path
def depends(path):
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        data = lzma.decompress(data)
    found = re.search(rb"(?:^|\0)depends=([^\0]*)", data)
    return [d.replace("-", "_") for d in found.group(1).decode().split(",") if d] if found else []
order = []
def visit(name):
    if name in order or name not in paths:
        return  # loaded already, or built into this kernel
    for dep in depends(paths[name]):
        visit(dep)
    order.append(name)
for name in sys.argv[3:]:
    visit(name)
print("\n".join(str(paths[name].relative_to(tree)) for name in order))
PY
}

# modules NAME...: see the header.
modules() {
    local dir kver
    dir="$(cache_entry)" || die "no guest kernel in $DRACPU_CACHE (run tools/tier-bignode.sh bootstrap)"
    kver="$(cat "$dir/kernel-version")"
    modules_in_order "$dir/kroot" "$kver" "$@" | sed "s|^|$dir/kroot/lib/modules/$kver/|"
}

build_kernel() {
    local package="$1" dir="$2" kver="${1#linux-image-}"
    rm -rf "$dir"; mkdir -p "$dir/deb" "$dir/kroot" "$dir/initrd"
    say "apt-get download $package"
    (cd "$dir/deb" && apt-get download -q "$package" >/dev/null 2>&1) || {
        apt-get update -q >/dev/null; (cd "$dir/deb" && apt-get download -q "$package" >/dev/null); }
    say "unpacking $(ls "$dir/deb")"
    dpkg-deb -x "$dir"/deb/*.deb "$dir/kroot"
    say "extracting the decompressed vmlinux (qemu boots it through PVH)"
    extract_vmlinux "$dir/kroot/boot/vmlinuz-$kver" "$dir/vmlinux"
    local initrd="$dir/initrd" module list=()
    mkdir -p "$initrd"/{bin,dev,proc,sys,mods,newroot,host,rw}
    cp /bin/busybox "$initrd/bin/busybox"
    for applet in $("$initrd/bin/busybox" --list); do
        [[ "$applet" == busybox ]] || ln -sf busybox "$initrd/bin/$applet"
    done
    mapfile -t list < <(modules_in_order "$dir/kroot" "$kver" $MODULES)
    ((${#list[@]})) || die "none of the modules $MODULES found in $package"
    : > "$initrd/mods/order"
    for module in "${list[@]}"; do
        local name; name="$(basename "$module")"
        case "$name" in
            *.ko.xz) xz -dc "$dir/kroot/lib/modules/$kver/$module" > "$initrd/mods/${name%.xz}" ;;
            *.ko.zst) zstd -qdc "$dir/kroot/lib/modules/$kver/$module" > "$initrd/mods/${name%.zst}" ;;
            *) cp "$dir/kroot/lib/modules/$kver/$module" "$initrd/mods/" ;;
        esac
        echo "${name%.ko*}.ko" >> "$initrd/mods/order"
    done
    say "modules: $(tr '\n' ' ' < "$initrd/mods/order")"
    install -m 0755 "$HERE/bignode/init.sh" "$initrd/init"
    (cd "$initrd" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$dir/initrd.gz"
    rm -rf "$dir/deb" "$dir/kroot/boot" "$dir/kroot/usr"
    printf '%s\n' "$kver" > "$dir/kernel-version"
    touch "$dir/.complete"
    say "kernel $kver and initramfs ($(du -k "$dir/initrd.gz" | cut -f1) KiB) in $dir"
}

bootstrap() {
    [[ $(id -u) -eq 0 ]] || skip "not root (qemu's 9p root share, cgroups and runc in the guest)"
    [[ "$(uname -m)" == x86_64 ]] || skip "the host is $(uname -m), not x86_64"
    cache_ready containerd "$CONTAINERD" ||
        skip "containerd $CONTAINERD not in $DRACPU_CACHE (run tools/tier-realnode.sh bootstrap)"
    [[ -x /usr/sbin/runc ]] || skip "no /usr/sbin/runc (run tools/tier-realnode.sh bootstrap)"
    install_debs
    local package key dir
    package="$(kernel_package)"
    [[ -n "$package" ]] || skip "apt knows no linux-image-amd64 (not Debian?)"
    dir="$DRACPU_CACHE/bignode-${package#linux-image-}-r$RECIPE"
    if [[ -f "$dir/.complete" ]]; then
        say "kernel and initramfs cached in $dir"
    else
        build_kernel "$package" "$dir"
    fi
    check_boot "$dir"
    if cache_ready kubernetes "$KUBERNETES" && [[ -x "$ROOT/.tools/bin/helm" ]]; then
        disk >/dev/null
    else
        say "no Kubernetes $KUBERNETES or helm (tools/tier-e2e.sh bootstrap): the guest's cluster tests will skip"
    fi
    say "ready"
}

# disk [ARCHIVE...]: the image disk for the driver images of this checkout (built by
# tools/tier-docker.sh images, cached by content) and of the ARCHIVEs given (another release's
# images: a node that is upgraded from it), keyed by all the archives' paths, sizes and times:
# the import stamps inside it name them, so the guest's node finds its images imported. Prints
# the disk's path, then the driver archives' (this checkout's first), separated by spaces.
disk() {
    local archive sandbox key dir out tmp archives
    archive="$(bash "$HERE/tier-docker.sh" images | tail -n 1)"
    [[ -f "$archive" ]] || die "tools/tier-docker.sh images gave no archive ('$archive')"
    for tmp in "$@"; do [[ -f "$tmp" ]] || die "disk: no archive $tmp"; done
    archives="$archive${1:+ $*}"
    sandbox="$(cache_dir realnode-image 1)/busybox-pause.tar"
    # shellcheck disable=SC2086  # one word per archive
    key="$(stat -c '%n %s %Y' $archives "$sandbox" | sha256sum | cut -c1-16)"
    dir="$DRACPU_CACHE/bignode-disk"
    out="$dir/images-$key.ext4"
    mkdir -p "$dir"
    # Guests of several checkouts may run at once: one disk built at a time, the newest four kept
    # (a running guest holds its own open, so removing an older one never pulls it from under it).
    exec 8>"$dir/.lock"
    flock 8
    if [[ ! -f "$out" ]]; then
        tmp="$(mktemp -d /tmp/dracpu-image-disk.XXXXXX)"
        say "building the guest node's image disk from $archives"
        DRACPU_CLUSTER_DIR="$tmp" DRACPU_CLUSTER_IMAGES="$archives" \
            bash "$HERE/cluster.sh" image-disk "$out" >&2 || { rm -rf "$tmp"; die "image disk failed"; }
        rm -rf "$tmp"
        find "$dir" -maxdepth 1 -name 'images-*.ext4' -printf '%T@ %p\n' \
            | sort -rn | tail -n +5 | cut -d' ' -f2- | xargs -r rm -f
    fi
    printf '%s\n%s\n' "$out" "$archives"
}

# check_boot DIR: qemu can run this kernel here (a TCG start that reaches the kernel).
check_boot() {
    qemu-system-x86_64 -accel help 2>/dev/null | grep -qx tcg || skip "this qemu has no TCG"
    [[ -s "$1/vmlinux" && -s "$1/initrd.gz" ]] || die "$1 is incomplete (remove it and bootstrap)"
}

check() {
    local missing=()
    [[ $(id -u) -eq 0 ]] || missing+=("root")
    command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=("qemu-system-x86_64")
    cache_entry >/dev/null || missing+=("the kernel and initramfs")
    cache_ready containerd "$CONTAINERD" || missing+=("containerd $CONTAINERD")
    [[ -x /usr/sbin/runc ]] || missing+=("runc")
    if ((${#missing[@]})); then
        echo "${missing[*]// /_} missing (run tools/tier-bignode.sh bootstrap as root)" | tr '_' ' '
        return 1
    fi
}

case "${1:-}" in
    bootstrap) bootstrap ;;
    check) check ;;
    disk) shift; disk "$@" ;;
    modules) shift; modules "$@" ;;
    up | down | shell | status)
        exec "$ROOT/.venv/bin/python" "$ROOT/tests/harness/guest.py" "$1" ;;
    *) echo "usage: $0 bootstrap|up|down|shell|status|check|disk [ARCHIVE...]|modules NAME..." >&2; exit 2 ;;
esac
