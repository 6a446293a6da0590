#!/usr/bin/env bash
# Builds kwok, the kubelet simulator the scheduler scale benchmark uses to stand up hundreds of
# fake Nodes, into the cache outside the clone:
#   kwok-<v>/bin/kwok
# from its Go module (sigs.k8s.io/kwok/cmd/kwok) with `go install` and GOBIN pointed at the
# cache. Cold on 2 cores: about 2 min (go build, machine shared); warm: instant. No test tier
# needs it; benchmarks/scheduler_scale_bench.py runs it when the binary is missing.
# No Go: one line saying why, exit 1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
PREFIX=build-kwok

dir="$(cache_dir kwok "$KWOK_VERSION")"
if cache_ready kwok "$KWOK_VERSION" && [[ -x "$dir/bin/kwok" ]]; then
    log "$PREFIX" "kwok $KWOK_VERSION cached in $dir"
    exit 0
fi
need_go "$PREFIX"

rm -rf "$dir"
mkdir -p "$dir/bin"
log "$PREFIX" "building sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
GOBIN="$dir/bin" GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 \
    with_heartbeat "$PREFIX" "go install kwok" \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
"$dir/bin/kwok" --help >/dev/null 2>&1 || die "the built kwok does not run"
cache_seal kwok "$KWOK_VERSION"
log "$PREFIX" "kwok $KWOK_VERSION done in $dir"
