#!/usr/bin/env bash
# Builds CRI-O, the second real-node runtime, into the cache outside the clone:
#   crio-<v>/bin/{crio,pinns}
# crio from its Go module (github.com/cri-o/cri-o, built in the module cache's copy with its own
# go.mod and go.sum) with the tags that leave out gpgme, btrfs and devicemapper; seccomp is built
# in against Debian's libseccomp-dev. pinns (C, in the same module's pinns/src) is built with
# gcc, statically, as upstream's Makefile does. conmon, CRI-O's container monitor, comes from
# Debian (`conmon`); runc is the one the real-node tier installs. The Go module proxy serves
# exact versions of CRI-O but refuses to list them, so the version is named: CRIO_VERSION.
# Cold on 2 cores: about 22 min (go build of crio, machine shared); warm: instant.
# Not root, or no Go or apt-get: one line saying why, exit 0.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CRIO_VERSION="${CRIO_VERSION:-v1.34.0}"
PREFIX=build-crio
CRIO_TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp"

if [[ $(id -u) -ne 0 ]]; then
    echo "$PREFIX: not root; CRI-O runs as root (runc, cgroups, mounts); not built"
    exit 0
fi

# Debian packages: conmon at run time; gcc, libc6-dev and libseccomp-dev to build.
missing=()
command -v conmon >/dev/null 2>&1 || missing+=(conmon)
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
[[ -f /usr/include/seccomp.h ]] || missing+=(libseccomp-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
if ((${#missing[@]})); then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$PREFIX: needs ${missing[*]} and apt-get is missing; CRI-O not built"
        exit 0
    fi
    log "$PREFIX" "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
        >/dev/null 2>&1 || {
        apt-get update -q >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${missing[@]}" >/dev/null 2>&1 || {
            echo "$PREFIX: apt-get cannot install ${missing[*]}; CRI-O not built"
            exit 0
        }
    }
fi

dir="$(cache_dir crio "$CRIO_VERSION")"
if cache_ready crio "$CRIO_VERSION"; then
    log "$PREFIX" "CRI-O $CRIO_VERSION cached in $dir"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "$PREFIX: go not found on PATH or in /usr/local/go/bin; CRI-O not built"
    exit 0
fi

rm -rf "$dir"
mkdir -p "$dir/bin"
log "$PREFIX" "downloading github.com/cri-o/cri-o@$CRIO_VERSION"
src="$(GOFLAGS=-mod=mod go mod download -json "github.com/cri-o/cri-o@$CRIO_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$src/pinns/src" ]] || die "github.com/cri-o/cri-o@$CRIO_VERSION has no pinns/src (module at '$src')"

log "$PREFIX" "building pinns with gcc"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for c in "$src"/pinns/src/*.c; do
    gcc -std=c99 -Os -Wall -Wextra -c "$c" -o "$work/$(basename "${c%.c}").o"
done
gcc -std=c99 -Os -static -o "$dir/bin/pinns" "$work"/*.o
strip -s "$dir/bin/pinns"

log "$PREFIX" "building crio $CRIO_VERSION (tags: $CRIO_TAGS)"
# Built inside the downloaded module (its own go.mod and go.sum): `go install module@version`
# asks the proxy for the module's version list, which it refuses.
(cd "$src" && GOFLAGS="-buildvcs=false -mod=readonly" CGO_ENABLED=1 with_heartbeat "$PREFIX" "go build crio" \
    go build -trimpath -tags "$CRIO_TAGS" \
    -ldflags "-s -w -X github.com/cri-o/cri-o/internal/version.buildDate=2026-01-01T00:00:00Z" \
    -o "$dir/bin/crio" ./cmd/crio)
"$dir/bin/crio" --version >/dev/null || die "the built crio does not run"
cache_seal crio "$CRIO_VERSION"
log "$PREFIX" "CRI-O $CRIO_VERSION done in $dir ($("$dir/bin/crio" --version 2>/dev/null | sed -n "s/^crio version *//p"))"
