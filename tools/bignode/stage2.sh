#!/bin/bash
# The big-node guest's second stage, PID 1 in the overlay root (the host's userland, read-only
# underneath): cgroup v2 with the cpuset, cpu, memory and pids controllers for the children,
# the loopback and the user-mode network's address, a shell on the second serial port, and the
# agent (tests/bignode/agent.py) on the forwarded port; a node's containerd and kubelet when
# the image disk holds one. When the agent ends the guest powers off; a reboot (the agent's
# `reboot`) resets the machine and boots it again.
STATE="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
# The host's tool cache (DRACPU_CACHE there), named on the kernel command line.
DRACPU_CACHE="$(sed -n 's/.*\bdracpu\.cache=\([^ ]*\).*/\1/p' /proc/cmdline)"
export DRACPU_CACHE="${DRACPU_CACHE:-/root/.cache/dracpu}"
say() { echo "bignode-stage2: [$(cut -d' ' -f1 /proc/uptime)s] $*" > /dev/ttyS0; }
# devtmpfs has no /dev/fd (process substitution needs it); udev is not here to add it.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
mkdir -p /dev/pts && mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
# The kubelet of the guest's cluster also wants io and hugetlb where the kernel has them.
echo "+cpuset +cpu +memory +pids +io +hugetlb" > /sys/fs/cgroup/cgroup.subtree_control ||
    echo "+cpuset +cpu +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control ||
    say "error: cannot enable the cgroup v2 controllers"
ip link set lo up
# qemu's user-mode network 10.96.0.0/24 (its gateway .2): 10.96.0.1:443 is forwarded to the
# host's API server, nothing else leaves (restrict=on).
ip link set eth0 up && ip addr add 10.96.0.15/24 dev eth0 && ip route add default via 10.96.0.2
say "cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
# A heartbeat on the console every 30 s, bash builtins only once started (no process to start,
# no file but /proc's): while it goes on the guest runs, whatever its network does; when it
# stops, the last one says what the guest looked like (tests/harness/guest.py reads it).
heartbeat() {
    local up l1 l5 l15 mem key value line stuck clock
    # A pipe nobody writes: `read -t` on it is a sleep without a process.
    exec {clock}<> <(:) || clock=""
    while :; do
        read -r up _ < /proc/uptime
        read -r l1 l5 l15 _ < /proc/loadavg
        while read -r key value _; do
            [[ $key == MemAvailable: ]] && mem=$((value / 1024)) && break
        done < /proc/meminfo
        stuck=0
        for line in /proc/[0-9]*/stat; do
            read -r line 2>/dev/null < "$line" || continue
            line=${line##*) }
            [[ ${line%% *} == D ]] && stuck=$((stuck + 1))
        done
        echo "bignode-heartbeat: [${up}s] MemAvailable ${mem} MiB, load ${l1} ${l5} ${l15}," \
            "${stuck} tasks in D state" > /dev/ttyS0
        if [[ -n $clock ]]; then read -rt 30 -u "$clock" _; else sleep 30; fi
    done
}
heartbeat &
# A shell for people: `tools/tier-bignode.sh shell` attaches to this port.
(while :; do setsid --ctty bash -i </dev/ttyS1 >/dev/ttyS1 2>&1; sleep 1; done) &
# The init system's part of a node: when the image disk holds a node's settings (the guest was
# the cluster's node before this boot), containerd and the kubelet start again with them
# (tools/bignode/node.sh boot; nothing when it holds none).
(
    bash "$ROOT/tools/bignode/node.sh" boot >> "$STATE/node-boot.log" 2>&1
    say "node boot ended with $?"
) &
say "agent starting (checkout $ROOT)"
# The venv has tests/ on its path (make venv); the agent's in-guest half imports the skew
# tier's modules by their own names.
PYTHONPATH="$ROOT/tests/skew" \
    "$ROOT/.venv/bin/python" "$ROOT/tests/bignode/agent.py" --port 7390 --state "$STATE" \
    >> "$STATE/agent.log" 2>&1 &
agent=$!
# PID 1 reaps orphans; it leaves the loop when the agent is gone.
while kill -0 "$agent" 2>/dev/null; do wait -n 2>/dev/null || sleep 1; done
say "agent ended; powering off"
sync
/bin/busybox poweroff -f
