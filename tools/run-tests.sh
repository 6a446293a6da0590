#!/usr/bin/env bash
# The test run of `make test` and `make check`, in two phases:
#   local  the tests that need neither root nor a real peer, spread over the machine's cores;
#   peers  the real-peer tiers (Docker engine, containerd node, control plane, cluster, chaos,
#          skew, big node), one test at a time: they share the node's runtime and ports;
#   compat the control-plane tier's compat checks again, on the oldest Kubernetes release of
#          tools/kubernetes-versions (the peers phase ran the whole tier on the newest);
#   crio   the real-node tier and one one-node-cluster scenario again, on CRI-O
#          (DRACPU_RUNTIME=crio; without root or CRI-O they skip, saying why).
# usage: tools/run-tests.sh local|all [pytest args...]
# Both phases run even when the first fails; the exit status is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
phases=$1
shift
PYTEST=${PYTEST:-.venv/bin/pytest}
PEER_MARKERS="docker or realnode or controlplane or e2e or chaos or skew or peer or slow or bignode or fleet"
# The fleet tier (a second guest and the host's cluster on CRI-O) runs with DRACPU_FLEET=1 or
# `make fleet`; the peers phase leaves it out otherwise.
RUN_PEERS="$PEER_MARKERS"
[ "${DRACPU_FLEET:-0}" = 1 ] || RUN_PEERS="($PEER_MARKERS) and not fleet"
workers=${DRACPU_TEST_WORKERS:-$(nproc)}
# Each phase's time and each test area's (tests/conftest.py) are appended to a log beside the
# tool cache, which outlives the clone: `<run> phase|area <name> <seconds>`, a run being the
# start time and the commit; the last 5,000 lines are kept.
export DRACPU_RUN_LOG=${DRACPU_RUN_LOG:-${DRACPU_CACHE:-$HOME/.cache/dracpu}/test-runs.tsv}
DRACPU_RUN_ID="$(date -u +%Y-%m-%dT%H:%M:%SZ)-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
export DRACPU_RUN_ID
mkdir -p "$(dirname "$DRACPU_RUN_LOG")" 2>/dev/null || true
if [ -f "$DRACPU_RUN_LOG" ] && [ "$(wc -l < "$DRACPU_RUN_LOG")" -gt 5000 ]; then
    tail -n 5000 "$DRACPU_RUN_LOG" > "$DRACPU_RUN_LOG.new" && mv "$DRACPU_RUN_LOG.new" "$DRACPU_RUN_LOG"
fi

run_phase() {
    local name=$1
    shift
    local began=$SECONDS
    echo "tests: phase '$name' ($*)"
    "$PYTEST" "$@"
    local status=$?
    [ "$status" -eq 5 ] && status=0  # nothing selected in this phase (a narrowed PYTEST_ARGS)
    echo "tests: phase '$name' took $((SECONDS - began)) s (exit $status)"
    printf '%s\tphase\t%s\t%s\t%s\n' "$DRACPU_RUN_ID" "$name" "$((SECONDS - began))" "$status" \
        >> "$DRACPU_RUN_LOG" 2>/dev/null || true
    return "$status"
}

status=0
run_phase local -n "$workers" --dist worksteal --durations=15 -m "not ($PEER_MARKERS)" "$@" || status=$?
if [ "$phases" = all ]; then
    run_phase peers --durations=40 -m "$RUN_PEERS" "$@" || { [ "$status" -ne 0 ] || status=$?; }
    oldest=$(source tools/kubernetes-versions.sh && kube_oldest)
    DRACPU_KUBE_VERSION=$oldest run_phase "compat on Kubernetes $oldest" --durations=10 -m compat \
        tests/controlplane "$@" || { [ "$status" -ne 0 ] || status=$?; }
    DRACPU_RUNTIME=crio run_phase crio --durations=10 tests/realnode \
        tests/e2e/test_e2e_scenarios.py::test_grouped_claim_pins_and_the_shared_pool_steps_aside \
        "$@" || { [ "$status" -ne 0 ] || status=$?; }
fi
exit "$status"
