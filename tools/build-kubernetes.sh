#!/usr/bin/env bash
# Builds the control-plane peers from the Go module proxy into the cache outside the clone:
#   kubernetes-<v>/bin/{kube-apiserver,kube-scheduler,kube-controller-manager,kubelet,kubectl}
#   etcd-<v>/bin/etcd
# KUBE_VERSION picks the release (default: the newest of tools/kubernetes-versions),
# KUBE_BINARIES which binaries (the older releases need only kube-apiserver and kube-scheduler:
# tools/tier-controlplane.sh and tools/compat.sh ask for those).
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging modules with local
# paths), so a wrapper module is generated in the cache: it requires k8s.io/kubernetes and
# replaces every staging module with its published v0.X.Y; each cmd/<binary>/main.go is the
# upstream command's own main file, copied from the module cache at build time.
# Cold on 2 cores: 10-17 min for the five binaries (one go build); warm: instant.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"
source "$here/kubernetes-versions.sh"
KUBE_VERSION="${KUBE_VERSION:-$(kube_newest)}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
KUBE_BINARIES="${KUBE_BINARIES:-kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl}"
need_go build-kubernetes
export GOFLAGS="-buildvcs=false" CGO_ENABLED=0

build_kube() {
    local dir mod staging minor missing=""
    dir="$(cache_dir kubernetes "$KUBE_VERSION")"
    for b in $KUBE_BINARIES; do [[ -x "$dir/bin/$b" ]] || missing="$missing $b"; done
    if [[ -z "$missing" ]]; then
        log build-kubernetes "kubernetes $KUBE_VERSION cached in $dir"
        return
    fi
    staging="v0.${KUBE_VERSION#v1.}"
    minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
    mod="$dir/module"
    mkdir -p "$mod" "$dir/bin"
    log build-kubernetes "wrapper module for k8s.io/kubernetes $KUBE_VERSION (staging $staging) in $mod"
    (
        cd "$mod"
        go mod download k8s.io/kubernetes@"$KUBE_VERSION"
        local modfile kd
        modfile="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBE_VERSION.mod"
        kd="$(go env GOMODCACHE)/k8s.io/kubernetes@$KUBE_VERSION"
        if [[ ! -f go.sum ]]; then
            {
                printf 'module example.local/k8sbins\n\ngo 1.26.0\n\ngodebug default=go1.26\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
                awk '/=> \.\/staging\/src\//{print $1}' "$modfile" |
                    grep -v -e sample-cli-plugin -e sample-controller |
                    while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
                printf ')\n'
            } > go.mod
        fi
        for pair in kube-apiserver:apiserver.go kube-scheduler:scheduler.go \
                    kube-controller-manager:controller-manager.go kubelet:kubelet.go kubectl:kubectl.go; do
            n="${pair%%:*}"
            mkdir -p "cmd/$n"
            install -m 644 "$kd/cmd/$n/${pair#*:}" "cmd/$n/main.go"
        done
        [[ -f go.sum ]] || go mod tidy
    )
    local ldf="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldf="$ldf -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
    done
    # One go build for every missing binary: the packages they share are loaded and checked
    # once, and one binary links while the next one's packages compile.
    local out="$dir/bin/.building" packages=()
    rm -rf "$out"
    mkdir -p "$out"
    for b in $missing; do packages+=("./cmd/$b"); done
    log build-kubernetes "building$missing $KUBE_VERSION in one go build"
    (cd "$mod" && with_heartbeat build-kubernetes "go build of$missing" \
        go build -trimpath -ldflags "$ldf" -o "$out/" "${packages[@]}")
    for b in $missing; do
        mv "$out/$b" "$dir/bin/$b"
        log build-kubernetes "built $b ($(stat -c %s "$dir/bin/$b") bytes)"
    done
    rmdir "$out"
    cache_seal kubernetes "$KUBE_VERSION"
}

build_etcd() {
    local dir
    dir="$(cache_dir etcd "$ETCD_VERSION")"
    if cache_ready etcd "$ETCD_VERSION"; then
        log build-kubernetes "etcd $ETCD_VERSION cached in $dir"
        return
    fi
    mkdir -p "$dir/module" "$dir/bin"
    log build-kubernetes "building etcd $ETCD_VERSION"
    (
        cd "$dir/module"
        install -m 644 "$here/etcd/main.go" main.go
        if [[ ! -f go.sum ]]; then
            printf 'module example.local/etcdbin\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
            go mod tidy
        fi
        go build -trimpath -ldflags "-s -w" -o "$dir/bin/etcd.tmp" .
    )
    mv "$dir/bin/etcd.tmp" "$dir/bin/etcd"
    cache_seal etcd "$ETCD_VERSION"
    log build-kubernetes "etcd done"
}

case "${1:-all}" in
    etcd) build_etcd ;;
    kube) build_kube ;;
    all) build_etcd; build_kube ;;
    *) echo "build-kubernetes: unknown target '$1' (etcd, kube or all)" >&2; exit 2 ;;
esac
