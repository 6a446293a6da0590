#!/usr/bin/env bash
# Builds the real-peer test harnesses (Go programs under tests/peers/) into .tools/bin with the
# Go toolchain and the Go module proxy. Idempotent: a harness is rebuilt only when one of its
# sources (or go.mod/go.sum) is newer than the binary. Without `go` it says so and skips; the
# peer tests then skip with the same reason.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/.tools/bin"
mkdir -p "$BIN"

if ! command -v go >/dev/null 2>&1; then
    echo "bootstrap-peers: go not found on PATH; skipping the Go peer harnesses (peer tests will be skipped)"
    exit 0
fi

export GOFLAGS="${GOFLAGS:-} -mod=readonly"

# build NAME DIR MODFILE [TAGS]
build() {
    local name="$1" dir="$2" modfile="$3" tags="${4:-}"
    local out="$BIN/$name"
    local sum="${modfile%.mod}.sum"
    if [[ -x "$out" ]] && [[ -z "$(find "$dir" -maxdepth 1 \( -name '*.go' -o -name "$modfile" -o -name "$sum" \) -newer "$out" -print -quit)" ]]; then
        echo "bootstrap-peers: $name is up to date"
        return 0
    fi
    echo "bootstrap-peers: building $name (go build -modfile=$modfile${tags:+ -tags $tags})"
    (cd "$dir" && go build -modfile="$modfile" ${tags:+-tags "$tags"} -o "$out.tmp" .)
    mv "$out.tmp" "$out"
}

# The genuine NRI runtime side, at the newest release and at the one containerd 2.0/2.1 ship.
build nri-runtime-latest tests/peers/nri go.mod
build nri-runtime-v0.8.0 tests/peers/nri go.v080.mod nri080
