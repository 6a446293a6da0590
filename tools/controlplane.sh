#!/usr/bin/env bash
# A loopback-only Kubernetes control plane for tests: etcd, kube-apiserver, kube-scheduler and
# kube-controller-manager from the cache (tools/build-kubernetes.sh), certificates made with
# openssl, everything under one folder. KUBE_VERSION picks the release (default: the newest of
# tools/kubernetes-versions). A release built without kube-controller-manager (the older ones:
# the compat checks need none) runs without it; `up` then creates the default ServiceAccount
# itself.
#
#   tools/controlplane.sh up DIR [extra kube-apiserver flags...]
#   tools/controlplane.sh down DIR
#   tools/controlplane.sh client DIR NAME CN [ORG]   client cert + DIR/NAME.kubeconfig
#   tools/controlplane.sh status DIR                  exit 0 when every process runs
#   tools/controlplane.sh stop DIR NAME...            the named processes (etcd, apiserver,
#                                                     scheduler, controller-manager) stopped by
#                                                     PID, their data kept: an outage
#   tools/controlplane.sh resume DIR                  every stopped process started again with
#                                                     the command line it had and its data (etcd's
#                                                     kept: the cluster's state is what it was);
#                                                     returns once /readyz answers ok
#
# Ports (loopback only) come from the environment, defaults in parentheses:
#   DRACPU_CP_ETCD_PORT (16379), DRACPU_CP_ETCD_PEER_PORT (16380),
#   DRACPU_CP_APISERVER_PORT (16443), DRACPU_CP_SCHEDULER_PORT (16459),
#   DRACPU_CP_CONTROLLER_MANAGER_PORT (16457)
# Feature gates: DRACPU_CP_FEATURE_GATES (e.g. `A=true,B=false`, default none), passed to the
# API server, the scheduler and the controller-manager alike.
# Client rates: DRACPU_CP_CLIENT_QPS and DRACPU_CP_CLIENT_BURST (default: the components' own,
# 50/100 for the scheduler, 20/30 for the controller-manager), passed to the scheduler and the
# controller-manager alike as --kube-api-qps/--kube-api-burst.
# Binaries: DRACPU_CP_BIN (default <cache>/kubernetes-<v>/bin), DRACPU_CP_ETCD
# (default <cache>/etcd-<v>/bin/etcd).
#
# DIR after `up`:
#   pki/            ca.{crt,key}, apiserver.{crt,key} (SANs 127.0.0.1, 10.96.0.1, kubernetes.*),
#                   sa.{key,pub}, admin/scheduler/controller-manager client certs
#   admin.kubeconfig scheduler.kubeconfig controller-manager.kubeconfig
#   controlplane.env shell-sourceable: ports, server URL, kubeconfig, binaries
#   <name>.pid       etcd apiserver scheduler controller-manager
#   logs/<name>.log
#   etcd-data/
#
# `up` returns once /readyz answers ok and the default ServiceAccount exists (pods can be
# created). It is idempotent: with the same apiserver flags and every process alive it does
# nothing; otherwise it stops what an earlier `up` on DIR left (by recorded PID, checked to be
# ours) and starts afresh with an empty etcd. `down` stops by PID, newest first, and keeps DIR.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"
source "$here/kubernetes-versions.sh"
KUBE_VERSION="${KUBE_VERSION:-$(kube_newest)}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
BIN="${DRACPU_CP_BIN:-$(cache_dir kubernetes "$KUBE_VERSION")/bin}"
ETCD="${DRACPU_CP_ETCD:-$(cache_dir etcd "$ETCD_VERSION")/bin/etcd}"
ETCD_PORT="${DRACPU_CP_ETCD_PORT:-16379}"
ETCD_PEER_PORT="${DRACPU_CP_ETCD_PEER_PORT:-16380}"
APISERVER_PORT="${DRACPU_CP_APISERVER_PORT:-16443}"
SCHEDULER_PORT="${DRACPU_CP_SCHEDULER_PORT:-16459}"
CONTROLLER_MANAGER_PORT="${DRACPU_CP_CONTROLLER_MANAGER_PORT:-16457}"
SERVICE_CIDR="${DRACPU_CP_SERVICE_CIDR:-10.96.0.0/16}"
READY_TIMEOUT="${DRACPU_CP_READY_TIMEOUT:-120}"
FEATURE_GATES="${DRACPU_CP_FEATURE_GATES:-}"
CLIENT_QPS="${DRACPU_CP_CLIENT_QPS:-}"
CLIENT_BURST="${DRACPU_CP_CLIENT_BURST:-}"
PROCESSES="etcd apiserver scheduler controller-manager"
[[ -x "$BIN/kube-controller-manager" ]] || PROCESSES="etcd apiserver scheduler"

LOG_PREFIX=controlplane

usage() {
    die "usage: controlplane.sh up DIR [apiserver flags...] | down DIR | status DIR | stop DIR NAME... | resume DIR | client DIR NAME CN [ORG]"
}

# pid_of DIR NAME: the recorded PID if that process is alive and was started for DIR.
pid_of() { pid_recorded "$1/$2.pid" "$1/"; }

stop_all() {
    local dir="$1" name
    for name in controller-manager scheduler apiserver etcd; do
        stop_recorded "$dir/$name.pid" "$dir/" "$name" 30
    done
}

port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

gen_pki() {
    local pki="$1/pki"
    [[ -f "$pki/.complete" ]] && return
    rm -rf "$pki"
    mkdir -p "$pki"
    (
        cd "$pki"
        umask 077
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
            -subj "/CN=dracpu-test-ca" 2>/dev/null
        cat > apiserver.ext <<EOF
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
keyUsage=digitalSignature,keyEncipherment
EOF
        openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
            -subj "/CN=kube-apiserver" 2>/dev/null
        openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -out apiserver.crt -days 3650 -extfile apiserver.ext 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    )
    client_cert "$1" admin admin system:masters
    client_cert "$1" scheduler system:kube-scheduler
    client_cert "$1" controller-manager system:kube-controller-manager
    touch "$pki/.complete"
}

# client_cert DIR NAME CN [ORG]: pki/NAME.{crt,key} signed by the CA.
client_cert() {
    local dir="$1" name="$2" cn="$3" org="${4:-}" pki="$1/pki"
    [[ -f "$pki/ca.key" ]] || die "$dir has no CA yet (run up first)"
    [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "client name '$name': letters, digits, . _ - only"
    (
        cd "$pki"
        umask 077
        printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' > "$name.ext"
        openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" \
            -subj "/CN=$cn${org:+/O=$org}" 2>/dev/null
        openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
            -out "$name.crt" -days 3650 -extfile "$name.ext" 2>/dev/null
    )
}

# kubeconfig DIR NAME: DIR/NAME.kubeconfig for the client cert pki/NAME.*.
kubeconfig() {
    local dir="$1" name="$2" pki="$1/pki"
    cat > "$dir/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: dracpu-test
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $pki/ca.crt
users:
- name: $name
  user:
    client-certificate: $pki/$name.crt
    client-key: $pki/$name.key
contexts:
- name: dracpu-test
  context: {cluster: dracpu-test, user: $name}
current-context: dracpu-test
EOF
}

start() { # DIR NAME argv...
    local dir="$1" name="$2"
    shift 2
    : > "$dir/logs/$name.log"
    # The command line, one argument per NUL-ended field, for `resume`.
    printf '%s\0' "$@" > "$dir/$name.argv"
    start_recorded "$dir/$name.pid" "$dir/logs/$name.log" "$dir/" "$@"
}

# api DIR PATH: GET PATH as admin; prints the body.
api() {
    curl -sS --max-time 5 --cacert "$1/pki/ca.crt" --cert "$1/pki/admin.crt" \
        --key "$1/pki/admin.key" "https://127.0.0.1:$APISERVER_PORT$2" 2>/dev/null
}

# wait_for DIR WHAT NAME CHECK...: run CHECK until it succeeds; NAME's process must stay alive.
wait_for() {
    local dir="$1" what="$2" name="$3" deadline=$((SECONDS + READY_TIMEOUT))
    shift 3
    until "$@"; do
        if ! pid_of "$dir" "$name" >/dev/null; then
            tail -n 5 "$dir/logs/$name.log" >&2 || true
            die "$name exited while waiting for $what (log: $dir/logs/$name.log)"
        fi
        ((SECONDS < deadline)) || die "$what not reached within ${READY_TIMEOUT}s (log: $dir/logs/$name.log)"
        sleep 0.2
    done
}

etcd_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
apiserver_ready() { [[ "$(api "$1" /readyz)" == ok ]]; }
default_sa() { api "$1" /api/v1/namespaces/default/serviceaccounts/default | grep -q '"kind": *"ServiceAccount"'; }

# create_default_sa DIR: what the controller-manager's ServiceAccount controller does for
# namespace default, for a control plane without one (pods need their ServiceAccount to exist).
create_default_sa() {
    default_sa "$1" && return
    curl -sS --max-time 5 --cacert "$1/pki/ca.crt" --cert "$1/pki/admin.crt" --key "$1/pki/admin.key" \
        -H 'Content-Type: application/json' -X POST \
        -d '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}' \
        "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default/serviceaccounts" >/dev/null 2>&1
    default_sa "$1"
}

all_running() {
    local name
    for name in $PROCESSES; do pid_of "$1" "$name" >/dev/null || return 1; done
}

write_env() {
    local dir="$1"
    cat > "$dir/controlplane.env" <<EOF
DRACPU_CP_DIR=$dir
DRACPU_CP_SERVER=https://127.0.0.1:$APISERVER_PORT
DRACPU_CP_KUBECONFIG=$dir/admin.kubeconfig
DRACPU_CP_CA=$dir/pki/ca.crt
DRACPU_CP_BIN=$BIN
DRACPU_CP_ETCD=$ETCD
DRACPU_CP_ETCD_PORT=$ETCD_PORT
DRACPU_CP_ETCD_PEER_PORT=$ETCD_PEER_PORT
DRACPU_CP_APISERVER_PORT=$APISERVER_PORT
DRACPU_CP_SCHEDULER_PORT=$SCHEDULER_PORT
DRACPU_CP_CONTROLLER_MANAGER_PORT=$CONTROLLER_MANAGER_PORT
DRACPU_CP_SERVICE_CIDR=$SERVICE_CIDR
DRACPU_CP_FEATURE_GATES=$FEATURE_GATES
DRACPU_CP_CLIENT_QPS=$CLIENT_QPS
DRACPU_CP_CLIENT_BURST=$CLIENT_BURST
EOF
}

cmd_up() {
    local dir="$1" pki name
    shift
    for name in kube-apiserver kube-scheduler; do
        [[ -x "$BIN/$name" ]] || die "$BIN/$name missing (run KUBE_VERSION=$KUBE_VERSION tools/build-kubernetes.sh)"
    done
    [[ -x "$ETCD" ]] || die "$ETCD missing (run tools/build-kubernetes.sh)"
    command -v openssl >/dev/null || die "openssl not found"
    command -v curl >/dev/null || die "curl not found"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    pki="$dir/pki"
    local wanted
    wanted="$(printf '%s\n' "$BIN" "$APISERVER_PORT" "$ETCD_PORT" "gates=$FEATURE_GATES" \
        "client=$CLIENT_QPS/$CLIENT_BURST" "$@")"
    if all_running "$dir" && [[ "$(cat "$dir/apiserver.args" 2>/dev/null)" == "$wanted" ]] \
        && apiserver_ready "$dir"; then
        say "already up in $dir (https://127.0.0.1:$APISERVER_PORT)"
        return
    fi
    stop_all "$dir"
    for port in "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$SCHEDULER_PORT" "$CONTROLLER_MANAGER_PORT"; do
        port_free "$port" || die "port 127.0.0.1:$port is in use (set DRACPU_CP_*_PORT)"
    done
    rm -rf "$dir/etcd-data" "$dir/logs" "$dir/apiserver-certs"
    mkdir -p "$dir/logs"
    gen_pki "$dir"
    for name in admin scheduler controller-manager; do kubeconfig "$dir" "$name"; done
    write_env "$dir"
    printf '%s\n' "$wanted" > "$dir/apiserver.args"

    say "starting etcd on 127.0.0.1:$ETCD_PORT"
    start "$dir" etcd "$ETCD" --name dracpu-cp --data-dir "$dir/etcd-data" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "dracpu-cp=http://127.0.0.1:$ETCD_PEER_PORT" \
        --unsafe-no-fsync --log-level warn
    wait_for "$dir" "etcd health" etcd etcd_healthy

    say "starting kube-apiserver on 127.0.0.1:$APISERVER_PORT ${*:+(extra: $*)}"
    start "$dir" apiserver "$BIN/kube-apiserver" \
        --bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" --advertise-address=127.0.0.1 \
        --endpoint-reconciler-type=none \
        --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --client-ca-file="$pki/ca.crt" \
        --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
        --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --authorization-mode=Node,RBAC --allow-privileged=true \
        --cert-dir="$dir/apiserver-certs" \
        --requestheader-client-ca-file="$pki/ca.crt" --requestheader-allowed-names=front-proxy-client \
        --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
        --requestheader-extra-headers-prefix=X-Remote-Extra- \
        ${FEATURE_GATES:+"--feature-gates=$FEATURE_GATES"} "$@"
    wait_for "$dir" "apiserver /readyz" apiserver apiserver_ready "$dir"
    say "kube-apiserver ready"

    start "$dir" scheduler "$BIN/kube-scheduler" \
        --kubeconfig="$dir/scheduler.kubeconfig" \
        --authentication-kubeconfig="$dir/scheduler.kubeconfig" \
        --authorization-kubeconfig="$dir/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --leader-elect=false \
        ${FEATURE_GATES:+"--feature-gates=$FEATURE_GATES"} \
        ${CLIENT_QPS:+"--kube-api-qps=$CLIENT_QPS"} ${CLIENT_BURST:+"--kube-api-burst=$CLIENT_BURST"}
    if [[ "$PROCESSES" == *controller-manager* ]]; then
        start "$dir" controller-manager "$BIN/kube-controller-manager" \
            --kubeconfig="$dir/controller-manager.kubeconfig" \
            --authentication-kubeconfig="$dir/controller-manager.kubeconfig" \
            --authorization-kubeconfig="$dir/controller-manager.kubeconfig" \
            --bind-address=127.0.0.1 --secure-port="$CONTROLLER_MANAGER_PORT" --leader-elect=false \
            --root-ca-file="$pki/ca.crt" --service-account-private-key-file="$pki/sa.key" \
            --use-service-account-credentials=true \
            --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
            --service-cluster-ip-range="$SERVICE_CIDR" \
            ${FEATURE_GATES:+"--feature-gates=$FEATURE_GATES"} \
            ${CLIENT_QPS:+"--kube-api-qps=$CLIENT_QPS"} ${CLIENT_BURST:+"--kube-api-burst=$CLIENT_BURST"}
        wait_for "$dir" "the default ServiceAccount" controller-manager default_sa "$dir"
    else
        wait_for "$dir" "the default ServiceAccount" apiserver create_default_sa "$dir"
    fi
    pid_of "$dir" scheduler >/dev/null || die "kube-scheduler exited (log: $dir/logs/scheduler.log)"
    say "up in $dir: https://127.0.0.1:$APISERVER_PORT, KUBECONFIG=$dir/admin.kubeconfig"
}

cmd_stop() {
    local dir="$1" name
    shift
    for name in "$@"; do
        [[ " $PROCESSES " == *" $name "* ]] || die "stop: no process '$name' (one of: $PROCESSES)"
        pid_of "$dir" "$name" >/dev/null || die "stop: $name is not running in $dir"
        stop_recorded "$dir/$name.pid" "$dir/" "$name" 30
        say "$name stopped"
    done
}

cmd_resume() {
    local dir="$1" name argv
    [[ -f "$dir/controlplane.env" ]] || die "resume: no control plane was started in $dir"
    # The ports `up` was given, whatever this environment says.
    APISERVER_PORT="$(sed -n 's/^DRACPU_CP_APISERVER_PORT=//p' "$dir/controlplane.env")"
    ETCD_PORT="$(sed -n 's/^DRACPU_CP_ETCD_PORT=//p' "$dir/controlplane.env")"
    for name in $PROCESSES; do
        pid_of "$dir" "$name" >/dev/null && continue
        [[ -f "$dir/$name.argv" ]] || die "resume: no recorded command line of $name in $dir"
        mapfile -d '' -t argv < "$dir/$name.argv"
        echo "--- resumed" >> "$dir/logs/$name.log"
        start_recorded "$dir/$name.pid" "$dir/logs/$name.log" "$dir/" "${argv[@]}"
        case "$name" in
            etcd) wait_for "$dir" "etcd health" etcd etcd_healthy ;;
            apiserver) wait_for "$dir" "apiserver /readyz" apiserver apiserver_ready "$dir" ;;
        esac
        say "$name started again"
    done
}

cmd_status() {
    local dir="$1" name pid status=0
    for name in $PROCESSES; do
        if pid="$(pid_of "$dir" "$name")"; then
            echo "$name: running (pid $pid)"
        else
            echo "$name: stopped"
            status=1
        fi
    done
    return $status
}

[[ $# -ge 2 ]] || usage
command="$1"
dir="$2"
shift 2
case "$command" in
    up) cmd_up "$dir" "$@" ;;
    down)
        [[ -d "$dir" ]] || exit 0
        stop_all "$(cd "$dir" && pwd)"
        ;;
    status) cmd_status "$(cd "$dir" && pwd)" ;;
    stop) cmd_stop "$(cd "$dir" && pwd)" "$@" ;;
    resume) cmd_resume "$(cd "$dir" && pwd)" ;;
    client)
        [[ $# -ge 2 ]] || usage
        dir="$(cd "$dir" && pwd)"
        client_cert "$dir" "$@"
        kubeconfig "$dir" "$1"
        echo "$dir/$1.kubeconfig"
        ;;
    *) usage ;;
esac
