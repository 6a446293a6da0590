#!/usr/bin/env bash
# The fleet tier: the chart on the host (CRI-O) and the big-node guest (containerd) under one
# control plane, tests in tests/fleet.
#   tools/tier-fleet.sh bootstrap
# reuses the e2e and big-node tiers' caches (run `make test` first, or their bootstraps), and
# adds what the guest's node enforces NetworkPolicy with: kube-network-policies, built from its
# Go module into the tool cache (tools/go-tool.sh), and Debian's nftables, whose `nft` reads the
# enforcer's rules (the guest runs the host's binaries). Not root, or either missing: one line
# saying why, exit 0; the enforcement test then skips with the same reason.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOG_PREFIX=tier-fleet

bootstrap() {
    [[ $(id -u) -eq 0 ]] || {
        echo "$LOG_PREFIX: not root; the fleet tier needs root (kubelets, runtimes, qemu); skipped"
        return 0
    }
    if ! command -v nft >/dev/null 2>&1; then
        say "installing nftables from apt (nft, to read the NetworkPolicy enforcer's rules)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nftables \
            >/dev/null || echo "$LOG_PREFIX: apt-get install nftables failed; NetworkPolicy enforcement will skip"
    fi
    if command -v go >/dev/null 2>&1; then
        bash "$ROOT/tools/go-tool.sh" kube-network-policies >/dev/null
    else
        echo "$LOG_PREFIX: go not found; kube-network-policies only from the cache"
    fi
}

case "${1:-}" in
    bootstrap) bootstrap ;;
    *) echo "usage: $0 bootstrap" >&2; exit 2 ;;
esac
