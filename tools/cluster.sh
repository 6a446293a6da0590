#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, for the chart's end-to-end tests and for
# trying the driver: the control plane of tools/controlplane.sh, containerd 2.4 (CRI, NRI at
# the chart's NRI socket, CDI in /etc/cdi and /var/run/cdi) with Debian's runc, and kubelet
# 1.37 (cgroupfs, failCgroupV1 false, CPU manager policy none), all from the cache.
# DRACPU_RUNTIME=crio runs CRI-O instead of containerd (see "CRI-O" below).
#
#   tools/cluster.sh up      start (or keep) the cluster; prints the kubeconfig path last
#   tools/cluster.sh down    stop everything by recorded PID and undo every host change
#   tools/cluster.sh status  exit 0 when every process of the cluster runs
#   tools/cluster.sh env     shell-sourceable settings (KUBECONFIG, KUBECTL, CRICTL, ...)
#   tools/cluster.sh runtime the node's runtime and version as its binary reports them
#   tools/cluster.sh tag IMAGE NEW
#                            the image IMAGE of the node's runtime also called NEW (containerd:
#                            `ctr images tag`; CRI-O: NEW pulled from the archives' registry)
#   tools/cluster.sh kubelet-stop | kubelet-start
#                            the kubelet alone stopped, or started (with
#                            DRACPU_CLUSTER_KUBELET_FLAGS) and waited for until its node is Ready;
#                            what an operator's `systemctl stop|start kubelet` does
#   tools/cluster.sh node    the node alone (containerd + kubelet) for a control plane elsewhere:
#                            it registers with DRACPU_CLUSTER_NODE_KUBECONFIG's API server (the
#                            big-node guest's node, its control plane on the host). With
#                            DRACPU_CLUSTER_SERVICE_UPSTREAM (HOST:PORT, the API server as this
#                            node reaches it) the node puts the `kubernetes` Service address on
#                            its loopback, relays it there and routes its pods to it, as `up`
#                            does on the host: pods on the pod network reach the API server
#   tools/cluster.sh image-disk FILE
#                            an ext4 image of a containerd root holding the sandbox and driver
#                            images and their import stamps, for a node that mounts it at
#                            DIR/containerd instead of importing (a guest imports ~40x slower)
#
# Network, all local: a bridge the script creates carries the node IP and the `kubernetes`
# Service address; tools/tcp-forward.py relays that address to the API server on loopback
# (there is no kube-proxy and no iptables here). Pods without hostNetwork (the driver's, with
# the chart's default values) get an address of DRACPU_CLUSTER_POD_CIDR on a CNI bridge, cni0
# (the `bridge`, `host-local` and `loopback` plugins of DRACPU_CLUSTER_CNI_BIN): they reach each
# other and the node, and, on the cluster of `up`, the `kubernetes` Service address (a route to
# it through the bridge, where the relay listens); nothing beyond. The bridge plugin enforces no
# NetworkPolicy. With DRACPU_CLUSTER_POD_CIDR empty there is no pod network: every pod must then
# be host-network, and containerd's one network config names the loopback plugin only (never
# invoked, as host-network sandboxes skip CNI), to report the runtime network ready.
#
# Settings (environment, defaults in parentheses):
#   DRACPU_CLUSTER_DIR (/tmp/dracpu-cluster)   everything the cluster writes, except host paths
#   DRACPU_CLUSTER_BRIDGE (dracpu-node0)       DRACPU_CLUSTER_NODE_IP (198.18.20.1)
#   DRACPU_CLUSTER_SERVICE_IP (10.96.0.1)      DRACPU_CLUSTER_KUBELET_PORT (17250)
#   DRACPU_CLUSTER_NRI_SOCKET (/var/run/nri/nri.sock, the chart's default)
#   DRACPU_CLUSTER_FEATURE_GATES (DRANodeAllocatableResources=true): feature gates of every
#     component, the control plane's and the kubelet's; the node then declares the feature, so
#     the chart's publishNodeAllocatableResourceMapping can be tried. Without the mapping in the
#     slices the gate changes nothing.
#   DRACPU_CLUSTER_IMAGES: archives of the driver images, separated by spaces: the docker tier's
#     docker-save archive of all five or a release's one per image (the e2e tier passes dist/'s;
#     default: built with `tools/tier-docker.sh images`); DRACPU_CLUSTER_APISERVER_FLAGS: extra kube-apiserver flags
#   DRACPU_CP_* ports of tools/controlplane.sh (this script's defaults: 17379/17380/17443/17459/17457)
#   DRACPU_CLUSTER_POD_CIDR (10.244.0.0/24; empty: no pod network)  DRACPU_CLUSTER_CNI_BIN (<cache>/cni-plugins-<v>/bin)
#   DRACPU_CLUSTER_NODE_NAME (the host name)   DRACPU_CLUSTER_NRI_TIMEOUT (2s): containerd's NRI
#     plugin_request_timeout (plugin_registration_timeout is 5s, or this when longer); a slow
#     node needs more, or a claimed container starts on the shared CPUs and is pinned after
#
#   DRACPU_RUNTIME (containerd): the node's runtime, containerd or crio
#   DRACPU_CLUSTER_KUBELET_FLAGS (none): extra kubelet flags, after --config so they win over
#     it (e.g. "--cpu-manager-policy=static --reserved-cpus=0"). `up` with other flags than
#     the running kubelet's restarts the kubelet alone, removing its CPU and Memory Manager
#     checkpoints (a kubelet refuses to start on a checkpoint of another policy)
#
# CRI-O (DRACPU_RUNTIME=crio): CRI-O (CRIO_VERSION, v1.34.0, built by tools/build-crio.sh) with
# Debian's conmon and the same runc, its socket at DIR/run/crio.sock. DIR/crio.conf keeps every
# path of CRI-O's under DIR (containers/storage, exits, attach sockets, namespaces, runc state;
# nothing of the host's /etc/crio or /etc/containers is read); what the driver needs of CRI-O is
# the drop-in DIR/crio.conf.d/10-dracpu.conf: NRI on at the chart's NRI socket, cgroupfs with
# conmon in the pod's cgroup (the kubelet's cgroupDriver), CDI specs from /etc/cdi and
# /var/run/cdi. CRI-O takes images only by pulling and this machine has no registry, so `up`
# serves the image archives from tests/harness/oci_registry.py on 127.0.0.1 (port
# DRACPU_CLUSTER_REGISTRY_PORT, 17500) for as long as it pulls them (DIR/registries.conf maps
# `localhost/...` and `docker.io/...` there, plain HTTP), then stops it; the image names stay
# `localhost/dracpu-...`, which the pods ask for with imagePullPolicy Never. `tag` serves an
# image of the archives under its new name the same way.
# `node` and `image-disk` are containerd's only.
#
# `up` is idempotent and tolerates what a killed run left behind (stale sockets, mounts,
# sandboxes, cgroups, the bridge): it runs `down` first unless every process still runs.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/lib.sh"
LOG_PREFIX=cluster

DIR="${DRACPU_CLUSTER_DIR:-/tmp/dracpu-cluster}"
BRIDGE="${DRACPU_CLUSTER_BRIDGE:-dracpu-node0}"
NODE_IP="${DRACPU_CLUSTER_NODE_IP:-198.18.20.1}"
SERVICE_IP="${DRACPU_CLUSTER_SERVICE_IP:-10.96.0.1}"
KUBELET_PORT="${DRACPU_CLUSTER_KUBELET_PORT:-17250}"
NRI_SOCKET="${DRACPU_CLUSTER_NRI_SOCKET:-/var/run/nri/nri.sock}"
POD_CIDR="${DRACPU_CLUSTER_POD_CIDR-10.244.0.0/24}"
POD_ROUTES=""  # `up`: the route of the pods to the `kubernetes` Service address
CNI_BIN="${DRACPU_CLUSTER_CNI_BIN:-$(cache_dir cni-plugins "${CNI_PLUGINS_VERSION:-v1.10.0}")/bin}"
FEATURE_GATES="${DRACPU_CLUSTER_FEATURE_GATES-DRANodeAllocatableResources=true}"
export DRACPU_CP_FEATURE_GATES="$FEATURE_GATES"
export DRACPU_CP_ETCD_PORT="${DRACPU_CP_ETCD_PORT:-17379}"
export DRACPU_CP_ETCD_PEER_PORT="${DRACPU_CP_ETCD_PEER_PORT:-17380}"
export DRACPU_CP_APISERVER_PORT="${DRACPU_CP_APISERVER_PORT:-17443}"
export DRACPU_CP_SCHEDULER_PORT="${DRACPU_CP_SCHEDULER_PORT:-17459}"
export DRACPU_CP_CONTROLLER_MANAGER_PORT="${DRACPU_CP_CONTROLLER_MANAGER_PORT:-17457}"
KUBE_BIN="$(cache_dir kubernetes "${KUBE_VERSION:-v1.37.2}")/bin"
CONTAINERD_BIN="$(cache_dir containerd "${CONTAINERD_VERSION:-v2.4.2}")/bin"
RUNTIME="${DRACPU_RUNTIME:-containerd}"
RUNTIME="${RUNTIME,,}"
[[ "$RUNTIME" == containerd || "$RUNTIME" == crio ]] \
    || die "DRACPU_RUNTIME must be containerd or crio, not '$RUNTIME'"
CRIO_VERSION="${CRIO_VERSION:-v1.34.0}"
CRIO_BIN="$(cache_dir crio "$CRIO_VERSION")/bin"
CONMON="${DRACPU_CLUSTER_CONMON:-/usr/bin/conmon}"
REGISTRY_PORT="${DRACPU_CLUSTER_REGISTRY_PORT:-17500}"
CRICTL="$(cache_dir crictl "${CRICTL_VERSION:-v1.37.0}")/bin/crictl"
RUNC="${DRACPU_CLUSTER_RUNC:-/usr/sbin/runc}"
SANDBOX_IMAGE="localhost/dracpu-realnode:1"
SANDBOX_ARCHIVE="$(cache_dir realnode-image 1)/busybox-pause.tar"
NODE_NAME="${DRACPU_CLUSTER_NODE_NAME:-$(hostname)}"
NRI_TIMEOUT="${DRACPU_CLUSTER_NRI_TIMEOUT:-2s}"
KUBELET_FLAGS="${DRACPU_CLUSTER_KUBELET_FLAGS:-}"
CP="$DIR/controlplane"
RUN="$DIR/run"
SOCK="$RUN/containerd.sock"
[[ "$RUNTIME" == containerd ]] || SOCK="$RUN/crio.sock"
KUBECONFIG_PATH="$CP/admin.kubeconfig"

kubectl_() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
ctr_() { "$CONTAINERD_BIN/ctr" --address "$SOCK" --namespace k8s.io "$@"; }
crictl_() { "$CRICTL" --config "$DIR/crictl.yaml" --timeout 10s "$@"; }

# What this machine lacks for the cluster, one reason per line (nothing when it can run).
missing() {
    [[ "$(id -u)" == 0 ]] || echo "not root (the kubelet, runc, cgroups and the bridge need root)"
    local tool
    local runtime_tools=("$CONTAINERD_BIN/containerd" "$CONTAINERD_BIN/containerd-shim-runc-v2"
        "$CONTAINERD_BIN/ctr")
    if [[ "$RUNTIME" == crio ]]; then
        runtime_tools=("$CRIO_BIN/crio" "$CRIO_BIN/pinns" "$CONMON" "$CNI_BIN/loopback")
    fi
    [[ -z "$POD_CIDR" ]] || runtime_tools+=("$CNI_BIN/bridge" "$CNI_BIN/host-local" "$CNI_BIN/loopback")
    for tool in "$KUBE_BIN/kubelet" "$KUBE_BIN/kubectl" "$KUBE_BIN/kube-apiserver" \
        "${runtime_tools[@]}" "$CRICTL" "$SANDBOX_ARCHIVE"; do
        [[ -e "$tool" ]] || echo "$tool missing (tools/tier-realnode.sh / tools/build-*.sh bootstrap)"
    done
    [[ -x "$RUNC" ]] || echo "runc missing at $RUNC"
    command -v ip >/dev/null 2>&1 || echo "ip (iproute2) missing"
    [[ -x "$HERE/controlplane.sh" ]] || [[ -f "$HERE/controlplane.sh" ]] || echo "tools/controlplane.sh missing"
}

# pid_alive NAME: the PID recorded in $RUN/NAME.pid runs a command containing $DIR.
pid_alive() { pid_recorded "$RUN/$1.pid" "$DIR" >/dev/null; }
# stop_pid NAME: TERM the recorded process (only if it is ours), KILL after 20 s.
stop_pid() { stop_recorded "$RUN/$1.pid" "$DIR" "$1" 20; }
# start NAME COMMAND...: run detached, output in $DIR/logs/NAME.log, PID in $RUN/NAME.pid.
start() { local name="$1"; shift; start_recorded "$RUN/$name.pid" "$DIR/logs/$name.log" "$DIR" "$@"; }

wait_until() { # SECONDS WHAT COMMAND...: poll every 0.2 s
    local limit="$1" what="$2"; shift 2
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "$what not reached within ${limit} s (logs in $DIR/logs)"
        sleep 0.2
    done
}

write_configs() {
    mkdir -p "$DIR/cni" "$DIR/containerd" "$RUN" "$DIR/logs" "$DIR/kubelet" "$DIR/nri-plugins" \
        "$DIR/nri-conf.d" "$(dirname "$NRI_SOCKET")" /var/run/cdi /etc/cdi
    printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$SOCK" "$SOCK" >"$DIR/crictl.yaml"
    rm -f "$DIR"/cni/*.conflist
    if [[ -n "$POD_CIDR" ]]; then
        # The bridge's address is the range's first (isGateway); no route but the range's own.
        cat >"$DIR/cni/10-pods.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "dracpu-pods", "plugins": [{"type": "bridge", "bridge": "cni0",
 "isGateway": true, "ipMasq": false, "hairpinMode": true,
 "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]]$POD_ROUTES}}]}
EOF
    else
        cat >"$DIR/cni/10-hostnetwork.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "dracpu-hostnetwork", "plugins": [{"type": "loopback"}]}
EOF
    fi
    [[ "$RUNTIME" == containerd ]] || write_crio_configs
    cat >"$DIR/containerd.toml" <<EOF
version = 3
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$SANDBOX_IMAGE"
  [plugins.'io.containerd.cri.v1.runtime']
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
    # Without CAP_SYS_RESOURCE a sandbox's negative oom_score_adj would be refused.
    restrict_oom_score_adj = true
    # On by default, and then containerd drops every hugepage limit (the kubelet's and NRI's).
    disable_hugetlb_controller = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$RUNC"
          SystemdCgroup = false
          Root = "$RUN/runc"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$CNI_BIN"]
      conf_dir = "$DIR/cni"
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = "$NRI_SOCKET"
    plugin_path = "$DIR/nri-plugins"
    plugin_config_path = "$DIR/nri-conf.d"
    plugin_registration_timeout = "$(longer 5s "$NRI_TIMEOUT")"
    plugin_request_timeout = "$NRI_TIMEOUT"
EOF
    cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Local test node: the API server reaches it only for logs/exec; anonymous + AlwaysAllow.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $((KUBELET_PORT - 2))
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cpuManagerPolicy: none
staticPodPath: ""
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
serializeImagePulls: false
evictionHard: {memory.available: "50Mi", nodefs.available: "2%", imagefs.available: "2%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
featureGates: {$(gates_yaml)}
EOF
    echo "$FEATURE_GATES" >"$RUN/feature-gates"
}

# CRI-O's configuration: DIR/crio.conf keeps its state under DIR, the drop-in holds what the
# driver needs (the one a node's /etc/crio/crio.conf.d would get).
write_crio_configs() {
    mkdir -p "$DIR/crio.conf.d" "$DIR/registries.conf.d" "$DIR/crio" "$DIR/hooks.d"
    cat >"$DIR/crio.conf" <<EOF
# CRI-O for the one-node cluster: every path under $DIR
[crio]
root = "$DIR/crio/root"
runroot = "$DIR/crio/runroot"
storage_driver = "overlay"
log_dir = "$DIR/crio/podlogs"
version_file = "$DIR/crio/runroot/version"
version_file_persist = "$DIR/crio/root/version"
clean_shutdown_file = "$DIR/crio/root/clean.shutdown"

[crio.api]
listen = "$SOCK"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
conmon = "$CONMON"
hooks_dir = ["$DIR/hooks.d"]
container_exits_dir = "$DIR/crio/exits"
container_attach_socket_dir = "$DIR/crio/attach"
namespaces_dir = "$DIR/crio/ns"
pinns_path = "$CRIO_BIN/pinns"
irqbalance_config_file = ""
irqbalance_config_restore_file = "disable"
# Host-port mapping needs iptables or nft, which this machine lacks; no pod uses a host port.
disable_hostport_mapping = true
log_to_journald = false

[crio.runtime.runtimes.runc]
runtime_path = "$DIR/runc"
runtime_type = "oci"
runtime_root = "$RUN/runc"
monitor_path = "$CONMON"
monitor_cgroup = "pod"

[crio.image]
pause_image = "$SANDBOX_IMAGE"
pause_command = "/pause"
signature_policy = "$DIR/policy.json"

[crio.network]
network_dir = "$DIR/cni"
plugin_dirs = ["$CNI_BIN"]
EOF
    cat >"$DIR/crio.conf.d/10-dracpu.conf" <<EOF
# What the CPU driver needs of CRI-O
[crio.runtime]
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]

[crio.nri]
enable_nri = true
nri_listen = "$NRI_SOCKET"
nri_plugin_dir = "$DIR/nri-plugins"
nri_plugin_config_dir = "$DIR/nri-conf.d"
nri_plugin_registration_timeout = "$(longer 5s "$NRI_TIMEOUT")"
nri_plugin_request_timeout = "$NRI_TIMEOUT"
EOF
    # runc with the bundle made fit for this machine as containerd's settings make it
    # (tools/crio-runc.py); CRI-O's runtime_path takes no arguments.
    printf '#!/bin/sh\nexec /usr/bin/python3 %s %s "$@"\n' "$HERE/crio-runc.py" "$RUNC" >"$DIR/runc"
    chmod +x "$DIR/runc"
    printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$DIR/policy.json"
    printf '[storage]\ndriver = "overlay"\nrunroot = "%s"\ngraphroot = "%s"\n' \
        "$DIR/crio/runroot" "$DIR/crio/root" >"$DIR/storage.conf"
    # `localhost/<name>` and `docker.io/<name>` pulled from the loopback registry's <name>, which
    # serves only while images are pulled.
    local prefix
    # Short names (busybox:1.36) are Docker Hub's, as containerd takes them.
    echo 'unqualified-search-registries = ["docker.io"]' >"$DIR/registries.conf"
    for prefix in localhost docker.io; do
        printf '\n[[registry]]\nprefix = "%s"\nlocation = "127.0.0.1:%s"\ninsecure = true\n' \
            "$prefix" "$REGISTRY_PORT" >>"$DIR/registries.conf"
    done
}

# longer A B: the longer of two durations in seconds (`5s`, `30s`).
longer() { if ((${1%s} >= ${2%s})); then echo "$1"; else echo "$2"; fi; }

# The feature gates as the flow-style map of a KubeletConfiguration: `A: true, B: false`.
gates_yaml() {
    local gate gates out=()
    IFS=, read -ra gates <<<"$FEATURE_GATES"
    for gate in "${gates[@]}"; do
        [[ -n "$gate" ]] && out+=("${gate%%=*}: ${gate#*=}")
    done
    (IFS=,; echo "${out[*]}")
}

network_up() {
    ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
    ip addr replace "$NODE_IP/32" dev "$BRIDGE"
    ip addr replace "$SERVICE_IP/32" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    start forward python3 "$HERE/tcp-forward.py" "$SERVICE_IP:443" \
        "127.0.0.1:$DRACPU_CP_APISERVER_PORT" "$DIR"
}

# import_archive KIND ARCHIVE...: `ctr images import` of each archive unless these very archives
# were the last ones of their kind imported. One stamp per kind, not per archive: archives built
# from other trees carry the same image tags, so an archive imported before another one must be
# imported again. The driver's images come as one archive (the docker tier's) or one per image
# (a release's dist/).
import_archive() {
    local kind="$1" archive stamp seen=""
    shift
    stamp="$DIR/containerd/$kind.imported"
    for archive in "$@"; do seen+="$archive $(stat -c '%s %Y' "$archive");"; done
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$seen" ]]; then
        return 0
    fi
    for archive in "$@"; do
        say "importing $archive"
        ctr_ images import "$archive" >>"$DIR/logs/import.log" 2>&1 \
            || die "ctr images import $archive failed (see $DIR/logs/import.log)"
    done
    echo "$seen" >"$stamp"
}

driver_images() {
    if [[ -n "${DRACPU_CLUSTER_IMAGES:-}" ]]; then
        echo "$DRACPU_CLUSTER_IMAGES"
        return
    fi
    [[ -f "$HERE/tier-docker.sh" ]] || die "no DRACPU_CLUSTER_IMAGES and no tools/tier-docker.sh to build the images"
    bash "$HERE/tier-docker.sh" images | tail -n 1
}

node_ready() {
    [[ "$(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

cmd_status() {
    local name
    for name in forward "$RUNTIME" kubelet; do pid_alive "$name" || return 1; done
    bash "$HERE/controlplane.sh" status "$CP" >/dev/null 2>&1
}

cmd_up() {
    local reasons
    reasons="$(missing)"
    [[ -z "$reasons" ]] || die "cannot start the cluster: $(echo "$reasons" | paste -sd ';' -)"
    if cmd_status && node_ready && [[ "$(cat "$RUN/feature-gates" 2>/dev/null)" == "$FEATURE_GATES" ]] \
        && [[ "$(cat "$RUN/pod-cidr" 2>/dev/null)" == "$POD_CIDR" ]]; then
        if [[ "$(cat "$RUN/kubelet-flags" 2>/dev/null)" != "$KUBELET_FLAGS" ]]; then
            say "kubelet flags changed to '$KUBELET_FLAGS': restarting the kubelet"
            stop_pid kubelet
            rm -f "$DIR/kubelet/cpu_manager_state" "$DIR/kubelet/memory_manager_state"
            cmd_kubelet_start
        fi
        say "already running"
        echo "$KUBECONFIG_PATH"
        return 0
    fi
    cmd_down >/dev/null
    local t
    mkdir -p "$RUN" "$DIR/logs"
    POD_ROUTES=", \"routes\": [{\"dst\": \"$SERVICE_IP/32\"}]"
    write_configs
    echo "$POD_CIDR" >"$RUN/pod-cidr"
    t=$SECONDS
    # The API server reaches the kubelet (logs, exec) at the node's InternalIP, where the
    # kubelet listens; by default it would try the host name first, which resolves to loopback.
    # shellcheck disable=SC2086  # extra flags split on purpose
    bash "$HERE/controlplane.sh" up "$CP" --kubelet-preferred-address-types=InternalIP,Hostname \
        ${DRACPU_CLUSTER_APISERVER_FLAGS:-} >>"$DIR/logs/controlplane.log" 2>&1 \
        || die "control plane did not start (see $DIR/logs/controlplane.log)"
    say "control plane ready in $((SECONDS - t)) s"
    network_up
    if [[ "$RUNTIME" == crio ]]; then
        t=$SECONDS
        # shellcheck disable=SC2046  # one word per archive
        crio_images "$SANDBOX_ARCHIVE" $(driver_images)
        say "images in CRI-O in $((SECONDS - t)) s"
    else
        start_containerd 30
        t=$SECONDS
        import_archive sandbox "$SANDBOX_ARCHIVE"
        # shellcheck disable=SC2046  # one word per archive
        import_archive driver $(driver_images)
        say "images in containerd in $((SECONDS - t)) s"
    fi
    t=$SECONDS
    start_kubelet "$KUBECONFIG_PATH"
    wait_until 120 "node $NODE_NAME Ready" node_ready
    say "kubelet started, node Ready in $((SECONDS - t)) s"
    echo "$KUBECONFIG_PATH"
}

start_containerd() { # LIMIT: start and wait until it serves
    local t=$SECONDS
    PATH="$CONTAINERD_BIN:$PATH" start containerd "$CONTAINERD_BIN/containerd" --config "$DIR/containerd.toml"
    wait_until "$1" "containerd serving" ctr_ version
    say "containerd serving in $((SECONDS - t)) s"
}

crictl_ready() { crictl_ version; }

start_crio() { # LIMIT: start and wait until it serves
    local t=$SECONDS
    PATH="$CRIO_BIN:$PATH" CONTAINERS_STORAGE_CONF="$DIR/storage.conf" \
        CONTAINERS_REGISTRIES_CONF="$DIR/registries.conf" \
        start crio "$CRIO_BIN/crio" --config "$DIR/crio.conf" --config-dir "$DIR/crio.conf.d" \
        --registries-conf "$DIR/registries.conf" --registries-conf-dir "$DIR/registries.conf.d"
    wait_until "$1" "CRI-O serving" crictl_ready
    say "CRI-O $("$CRIO_BIN/crio" --version 2>/dev/null | awk '/^crio version/ {print $3}') serving in $((SECONDS - t)) s"
}

# crio_images ARCHIVE...: start CRI-O with every archive it has not pulled yet (one stamp per
# archive, as import_archive keeps) served by a registry on loopback, pull each image of them,
# stop the registry.
crio_images() {
    local archive stamp seen pending=() stamps=() names name
    for archive in "$@"; do
        stamp="$DIR/crio/$(basename "$archive").pulled"
        seen="$archive $(stat -c '%s %Y' "$archive")"
        if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$seen" ]]; then
            pending+=("$archive")
            stamps+=("$stamp=$seen")
        fi
    done
    if ((${#pending[@]} == 0)); then
        start_crio 30
        return 0
    fi
    start_registry "${pending[@]}"
    start_crio 30
    names="$(tail -n +2 "$RUN/registry.address")"
    for name in $names; do crio_pull "$name"; done
    stop_pid registry
    for stamp in "${stamps[@]}"; do echo "${stamp#*=}" >"${stamp%%=*}"; done
}

# start_registry [--alias NAME=NEW]... ARCHIVE...: the loopback registry, once it serves.
start_registry() {
    local i
    rm -f "$RUN/registry.address"
    start registry python3 "$HERE/../tests/harness/oci_registry.py" --port "$REGISTRY_PORT" \
        "$RUN/registry.address" "$@"
    for ((i = 0; i < 600; i++)); do
        [[ -s "$RUN/registry.address" ]] && break
        pid_alive registry || die "the image registry stopped (see $DIR/logs/registry.log)"
        sleep 0.1
    done
    [[ -s "$RUN/registry.address" ]] || die "the image registry did not start in 60 s"
}

crio_pull() { # NAME
    say "pulling $1"
    crictl_ --timeout 300s pull "$1" >>"$DIR/logs/import.log" 2>&1 \
        || die "crictl pull $1 failed (see $DIR/logs/import.log and crio.log)"
}

cmd_tag() { # IMAGE NEW
    local image="$1" new="$2" archive
    [[ -n "$image" && -n "$new" ]] || die "usage: cluster.sh tag IMAGE NEW"
    if [[ "$RUNTIME" == containerd ]]; then
        ctr_ images tag --force "$image" "$new" >/dev/null
        return
    fi
    # shellcheck disable=SC2046  # one word per archive
    for archive in "$SANDBOX_ARCHIVE" $(driver_images); do
        if tar -xOf "$archive" index.json | grep -qF "\"$image\""; then
            start_registry --alias "$image=$new" "$archive"
            crio_pull "$new"
            stop_pid registry
            return
        fi
    done
    die "tag: no archive of the node holds $image"
}

start_kubelet() { # KUBECONFIG
    echo "$KUBELET_FLAGS" >"$RUN/kubelet-flags"
    # shellcheck disable=SC2086  # extra flags split on purpose
    PATH="$CONTAINERD_BIN:$PATH" start kubelet "$KUBE_BIN/kubelet" --config "$DIR/kubelet.yaml" \
        --kubeconfig "$1" --root-dir "$DIR/kubelet" --node-ip "$NODE_IP" \
        --hostname-override "$NODE_NAME" -v 2 $KUBELET_FLAGS
}

cmd_kubelet_stop() { stop_pid kubelet; }

cmd_kubelet_start() {
    local t=$SECONDS
    pid_alive kubelet && die "kubelet-start: the kubelet runs already"
    start_kubelet "$KUBECONFIG_PATH"
    # The Node stays Ready for a while after its kubelet stopped: the kubelet's own health first.
    wait_until 120 "the kubelet healthy" kubelet_healthy
    wait_until 120 "node $NODE_NAME Ready" node_ready
    say "kubelet started${KUBELET_FLAGS:+ with $KUBELET_FLAGS}, node Ready in $((SECONDS - t)) s"
}

kubelet_healthy() { curl -sf "http://127.0.0.1:$((KUBELET_PORT - 2))/healthz"; }

# The node without the control plane, the bridge or the relay: the kubelet registers with the
# API server of DRACPU_CLUSTER_NODE_KUBECONFIG. Images: the sandbox image and
# DRACPU_CLUSTER_IMAGES, imported unless a preloaded root (image-disk) already holds them.
cmd_node() {
    [[ "$RUNTIME" == containerd ]] || die "node: only on containerd (DRACPU_RUNTIME=$RUNTIME)"
    local kubeconfig="${DRACPU_CLUSTER_NODE_KUBECONFIG:-}" t
    [[ -f "$kubeconfig" ]] || die "node: DRACPU_CLUSTER_NODE_KUBECONFIG names no file ('$kubeconfig')"
    if [[ -n "$POD_CIDR" ]]; then
        for t in bridge host-local loopback; do
            [[ -x "$CNI_BIN/$t" ]] || die "node: the pod network needs the CNI plugin $CNI_BIN/$t (tools/build-containerd.sh)"
        done
    fi
    local upstream="${DRACPU_CLUSTER_SERVICE_UPSTREAM:-}"
    mkdir -p "$RUN" "$DIR/logs"
    [[ -z "$upstream" ]] || POD_ROUTES=", \"routes\": [{\"dst\": \"$SERVICE_IP/32\"}]"
    write_configs
    if [[ -n "$upstream" ]]; then
        # The kubelet's own connections to the Service address take the relay too.
        ip addr replace "$SERVICE_IP/32" dev lo
        start forward python3 "$HERE/tcp-forward.py" "$SERVICE_IP:443" "$upstream" "$DIR"
        say "relaying $SERVICE_IP:443 to $upstream"
    fi
    start_containerd 120
    t=$SECONDS
    import_archive sandbox "$SANDBOX_ARCHIVE"
    # shellcheck disable=SC2086  # one word per archive
    [[ -z "${DRACPU_CLUSTER_IMAGES:-}" ]] || import_archive driver $DRACPU_CLUSTER_IMAGES
    say "images in containerd in $((SECONDS - t)) s"
    t=$SECONDS
    start_kubelet "$kubeconfig"
    wait_until 180 "the kubelet healthy" kubelet_healthy
    say "kubelet healthy in $((SECONDS - t)) s"
}

# image-disk FILE: run containerd on DIR (which must be empty: nothing else runs there, its NRI
# socket is its own), import both archives, stop it, and make FILE an ext4 image of
# DIR/containerd (the root and the import stamps; the state folder left out).
cmd_image_disk() {
    local out="$1" size
    [[ -n "$out" ]] || die "usage: cluster.sh image-disk FILE"
    [[ "$RUNTIME" == containerd ]] || die "image-disk: only of containerd (DRACPU_RUNTIME=$RUNTIME)"
    [[ -z "$(ls -A "$DIR" 2>/dev/null)" ]] || die "image-disk: $DIR is not empty"
    NRI_SOCKET="$RUN/nri.sock"
    mkdir -p "$RUN" "$DIR/logs"
    write_configs
    start_containerd 30
    import_archive sandbox "$SANDBOX_ARCHIVE"
    # shellcheck disable=SC2046  # one word per archive
    import_archive driver $(driver_images)
    stop_pid containerd
    rm -rf "$DIR/containerd/state"
    size=$(( $(du -sm "$DIR/containerd" | cut -f1) * 3 / 2 + 256 ))
    mkfs.ext4 -q -F -L dracpu-images -d "$DIR/containerd" "$out.tmp" "${size}M" >/dev/null \
        || die "mkfs.ext4 of $DIR/containerd failed"
    mv "$out.tmp" "$out"
    say "image disk $out ($size MB, $(du -sm "$out" | cut -f1) MB used)"
}

cmd_down() {
    mkdir -p "$RUN"
    stop_pid kubelet
    if [[ -S "$SOCK" ]] && pid_alive "$RUNTIME"; then
        local pod
        if [[ "$RUNTIME" == crio ]]; then
            # CRI-O's StopPodSandbox gives each container its whole grace period: stop them
            # first with a short one, as the kubelet stops containers before their pod.
            # shellcheck disable=SC2046  # container IDs
            crictl_ stop -t 1 $(crictl_ ps -q 2>/dev/null) >/dev/null 2>&1 || true
        fi
        for pod in $(crictl_ pods -q 2>/dev/null); do
            crictl_ stopp "$pod" >/dev/null 2>&1 || true
            crictl_ rmp -f "$pod" >/dev/null 2>&1 || true
        done
    fi
    stop_pid containerd
    stop_pid crio
    stop_pid registry
    # Shims of this containerd outlive it: find them by the socket on their command line; so
    # do CRI-O's conmons, found by their exit folder under DIR.
    local proc pid cmdline
    for proc in /proc/[0-9]*; do
        pid="${proc#/proc/}"
        cmdline="$({ tr '\0' ' ' <"$proc/cmdline"; } 2>/dev/null || true)"
        if [[ "$cmdline" == *"-address $SOCK "* ]]; then
            say "stopping leftover shim $pid"
            kill "$pid" 2>/dev/null || true
        elif [[ "$cmdline" == "$CONMON "* && "$cmdline" == *" --exit-dir $DIR/crio/exits "* ]]; then
            say "stopping leftover conmon $pid"
            kill "$pid" 2>/dev/null || true
        fi
    done
    # Containers whose shim is gone: runc's own state under our root.
    if [[ -d "$RUN/runc" ]]; then
        local id
        for id in $(ls "$RUN/runc" 2>/dev/null); do
            "$RUNC" --root "$RUN/runc" kill "$id" KILL >/dev/null 2>&1 || true
            "$RUNC" --root "$RUN/runc" delete -f "$id" >/dev/null 2>&1 || true
        done
    fi
    stop_pid forward
    if [[ -n "$POD_CIDR" ]]; then  # the pod network: its bridge and its address leases
        ip link del cni0 >/dev/null 2>&1 || true
        rm -rf /var/lib/cni/networks/dracpu-pods
    fi
    # Mounts below DIR, deepest first (sandbox shm, overlay rootfs, the kubelet's pod volumes).
    local mount
    for mount in $(awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
        umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || true
    done
    # The kubelet's cgroups (cgroupfs driver): empty ones only, leaves first, so a cgroup
    # still holding a process is never touched.
    local hierarchy
    for hierarchy in /sys/fs/cgroup /sys/fs/cgroup/*; do
        [[ -d "$hierarchy/kubepods" ]] || continue
        find "$hierarchy/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE"
        say "removed bridge $BRIDGE"
    fi
    if [[ -f "$HERE/controlplane.sh" ]]; then
        bash "$HERE/controlplane.sh" down "$CP" >/dev/null 2>&1 || true
    fi
    rm -f "$SOCK" "$SOCK.ttrpc" "$NRI_SOCKET"
    rm -rf "$DIR/kubelet/plugins" "$DIR/kubelet/plugins_registry" "$DIR/kubelet/pods"
    say "down"
}

cmd_runtime() {
    if [[ "$RUNTIME" == crio ]]; then
        echo "CRI-O $("$CRIO_BIN/crio" --version 2>/dev/null | awk '/^crio version/ {print $3}')"
    else
        echo "containerd $("$CONTAINERD_BIN/containerd" --version 2>/dev/null | awk '{print $3}')"
    fi
}

cmd_env() {
    cat <<EOF
export KUBECONFIG=$KUBECONFIG_PATH
KUBECTL=$KUBE_BIN/kubectl
CRICTL="$CRICTL --config $DIR/crictl.yaml"
CTR=$CONTAINERD_BIN/ctr
CONTAINERD_SOCKET=$SOCK
RUNTIME=$RUNTIME
RUNTIME_SOCKET=$SOCK
CLUSTER_DIR=$DIR
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
POD_CIDR=$POD_CIDR
KUBELET_ROOT=$DIR/kubelet
NRI_SOCKET=$NRI_SOCKET
FEATURE_GATES=$FEATURE_GATES
EOF
}

[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0  # sourced: functions only
case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    runtime) cmd_runtime ;;
    tag) cmd_tag "${2:-}" "${3:-}" ;;
    missing) missing ;;
    node) cmd_node ;;
    kubelet-stop) cmd_kubelet_stop ;;
    kubelet-start) cmd_kubelet_start ;;
    image-disk) cmd_image_disk "${2:-}" ;;
    *) die "usage: cluster.sh up|down|status|env|runtime|tag IMAGE NEW|kubelet-stop|kubelet-start|node|image-disk FILE" ;;
esac
