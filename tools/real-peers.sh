#!/usr/bin/env bash
# Bootstraps the real-peer test tiers that `make test` runs: each tier has a script
# tools/tier-<name>.sh whose `bootstrap` subcommand builds or installs what its tests need
# (into the cache outside the clone, see tools/lib.sh) and prints progress. A tier that
# cannot run here (not root, a tool missing) prints one line saying why and exits 0; its tests
# then skip with the same reason. Each tier's bootstrap time is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
DEFAULT_TIERS="docker realnode controlplane e2e bignode"
# The fleet tier's own bootstrap when `make test` runs it (DRACPU_FLEET=1, tools/run-tests.sh).
[ "${DRACPU_FLEET:-0}" = 1 ] && DEFAULT_TIERS="$DEFAULT_TIERS fleet"
TIERS="${DRACPU_TIERS:-$DEFAULT_TIERS}"
status=0
for tier in $TIERS; do
    script="tools/tier-$tier.sh"
    [[ -f "$script" ]] || continue
    start=$SECONDS
    echo "real-peers: bootstrapping tier '$tier'"
    if ! bash "$script" bootstrap; then
        echo "real-peers: tier '$tier' bootstrap FAILED after $((SECONDS - start)) s" >&2
        status=1
        continue
    fi
    echo "real-peers: tier '$tier' ready in $((SECONDS - start)) s"
done
exit $status
