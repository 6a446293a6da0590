#!/bin/sh
# The big-node guest's first stage (PID 1 of the initramfs, busybox): the host's / over virtio-9p
# read-only under a tmpfs overlay, the state folder over 9p read-write, then switch_root into
# the second stage (tools/bignode/stage2.sh of the checkout, named on the kernel command line).
# runc's pivot_root needs a real root, hence the switch_root rather than a chroot.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
say() { echo "bignode-init: [$(cut -d' ' -f1 /proc/uptime)s] $*" > /dev/ttyS0; }
arg() { sed -n "s/.*\bdracpu\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
fail() { say "error: $*"; poweroff -f; }
say "kernel $(uname -r), $(nproc) CPUs"
while read -r module; do
    insmod "/mods/$module" || fail "insmod $module"
done < /mods/order
STATE="$(arg state)"
STAGE2="$(arg stage2)"
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose dracpu-host /host ||
    fail "the host's / over 9p"
mount -t tmpfs -o size=3G,mode=0755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /newroot ||
    fail "the overlay root"
# A tmpfs of its own on /tmp: the host's /tmp (other runs' folders) stays out of sight, and
# containerd's overlay snapshots need a real file system under them.
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
# A checkout under /tmp (a CI clone, say) stays in sight: an overlay of its own, writable like
# the rest of the root.
CHECKOUT="${STAGE2%/tools/bignode/stage2.sh}"
case "$CHECKOUT" in
/tmp/*)
    mkdir -p "/newroot$CHECKOUT" /rw/checkout/upper /rw/checkout/work
    mount -t overlay overlay \
        -o "lowerdir=/host$CHECKOUT,upperdir=/rw/checkout/upper,workdir=/rw/checkout/work" \
        "/newroot$CHECKOUT" || fail "the checkout $CHECKOUT"
    ;;
esac
# So does a tool cache under /tmp (DRACPU_CACHE), read-only as the host's / it is bound from.
CACHE="$(arg cache)"
case "$CACHE" in
/tmp/*)
    mkdir -p "/newroot$CACHE"
    mount -o bind "/host$CACHE" "/newroot$CACHE" || fail "the tool cache $CACHE"
    ;;
esac
mkdir -p "/newroot$STATE"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 dracpu-state "/newroot$STATE" ||
    fail "the state folder $STATE over 9p"
say "switching root; stage 2: $STAGE2"
for d in proc sys dev; do mount --move "/$d" "/newroot/$d"; done
exec switch_root /newroot /bin/bash "$STAGE2" "$STATE"
