#!/usr/bin/env bash
# Builds a pinned release tool from its Go module into the tool cache, once per version, and
# prints the binary's path: the only registry of binaries reachable here is the Go module proxy,
# so no release archive is downloaded.
#
#   tools/go-tool.sh syft       Anchore's SBOM generator (make release's SBOMs)
#
# Prints ${DRACPU_CACHE}/<tool>-<version>/bin/<tool>. Environment: SYFT_VERSION
# (default the pin below).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOG_PREFIX=go-tool

tool="${1:-}"
case "$tool" in
    syft)
        version="${SYFT_VERSION:-v1.57.2}"
        module="github.com/anchore/syft/cmd/syft"
        # Stamped as syft's own release build does, so `syft version` reports it.
        ldflags="-X main.version=${version#v}"
        ;;
    *) echo "usage: $0 syft" >&2; exit 2 ;;
esac

dir="$(cache_dir "$tool" "$version")"
if ! cache_ready "$tool" "$version"; then
    need_go go-tool
    rm -rf "$dir"; mkdir -p "$dir/bin"
    say "building $tool $version from its Go module (a few minutes the first time)"
    if ! with_heartbeat "$LOG_PREFIX" "go install $tool" env GOBIN="$dir/bin" GOFLAGS=-mod=mod \
        nice go install -ldflags "$ldflags" "$module@$version" > "$dir/build.log" 2>&1; then
        tail -5 "$dir/build.log" >&2
        die "building $tool $version failed (log: $dir/build.log)"
    fi
    cache_seal "$tool" "$version"
    say "$tool $version in $dir/bin"
fi
printf '%s\n' "$dir/bin/$tool"
