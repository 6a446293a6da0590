#!/usr/bin/env bash
# Builds a pinned release tool from its Go module into the tool cache, once per version, and
# prints the binary's path: the only registry of binaries reachable here is the Go module proxy,
# so no release archive is downloaded.
#
#   tools/go-tool.sh syft       Anchore's SBOM generator (make release's SBOMs)
#   tools/go-tool.sh kube-network-policies
#                               SIG Network's NetworkPolicy enforcer (nftables and nfqueue),
#                               which the fleet tier runs on the guest's node
#
# Prints ${DRACPU_CACHE}/<tool>-<version>/bin/<tool>; with --cached after the tool's name it
# builds nothing, and exits 1 saying so when the cache has no build. Environment: SYFT_VERSION,
# KUBE_NETWORK_POLICIES_VERSION (default the pins below).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOG_PREFIX=go-tool

tool="${1:-}"
cached_only="${2:-}"
case "$tool" in
    syft)
        version="${SYFT_VERSION:-v1.57.2}"
        module="github.com/anchore/syft/cmd/syft"
        # Stamped as syft's own release build does, so `syft version` reports it.
        ldflags="-X main.version=${version#v}"
        ;;
    kube-network-policies)
        version="${KUBE_NETWORK_POLICIES_VERSION:-v0.8.0}"
        module="sigs.k8s.io/kube-network-policies/cmd"
        ldflags="-s -w"
        ;;
    *) echo "usage: $0 syft|kube-network-policies" >&2; exit 2 ;;
esac
built="${module##*/}"  # the name go install gives the binary: its package's last element

dir="$(cache_dir "$tool" "$version")"
if [[ "$cached_only" == --cached ]] && ! cache_ready "$tool" "$version"; then
    echo "$tool $version is not built (tools/go-tool.sh $tool)" >&2
    exit 1
fi
if ! cache_ready "$tool" "$version"; then
    need_go go-tool
    rm -rf "$dir"; mkdir -p "$dir/bin"
    say "building $tool $version from its Go module (a few minutes the first time)"
    if ! with_heartbeat "$LOG_PREFIX" "go install $tool" env GOBIN="$dir/bin" GOFLAGS=-mod=mod \
        nice go install -ldflags "$ldflags" "$module@$version" > "$dir/build.log" 2>&1; then
        tail -5 "$dir/build.log" >&2
        die "building $tool $version failed (log: $dir/build.log)"
    fi
    [[ "$built" == "$tool" ]] || mv "$dir/bin/$built" "$dir/bin/$tool"
    cache_seal "$tool" "$version"
    say "$tool $version in $dir/bin"
fi
printf '%s\n' "$dir/bin/$tool"
