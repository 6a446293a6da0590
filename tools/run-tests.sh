#!/usr/bin/env bash
# The test run of `make test` and `make check`, in phases:
#   local    the tests that need neither root nor a real peer, spread over the machine's cores;
#   peers    the real-peer tiers (Docker engine, containerd node, control plane, cluster, chaos,
#            skew), one test at a time: they share the node's runtime and ports;
#   crio     the real-node tier and one one-node-cluster scenario again, on CRI-O
#            (DRACPU_RUNTIME=crio; without root or CRI-O they skip, saying why);
#   bignode  the big-node tier, whose runtime, services and cluster node live in an emulated
#            guest on their own ports: it runs beside peers and crio (its own pytest session,
#            its output kept in a log and printed when it ends), as it is the longest tier and
#            mostly waits on the guest. DRACPU_BIGNODE_BESIDE=0 runs it after them instead.
# usage: tools/run-tests.sh local|all [pytest args...]
# Every phase runs even when an earlier one fails; the exit status is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
phases=$1
shift
PYTEST=${PYTEST:-.venv/bin/pytest}
PEER_MARKERS="docker or realnode or controlplane or e2e or chaos or skew or peer or slow or bignode"
HOST_PEERS="($PEER_MARKERS) and not bignode"
workers=${DRACPU_TEST_WORKERS:-$(nproc)}

run_phase() {
    local name=$1
    shift
    local began=$SECONDS
    echo "tests: phase '$name' ($*)"
    "$PYTEST" "$@"
    local status=$?
    [ "$status" -eq 5 ] && status=0  # nothing selected in this phase (a narrowed PYTEST_ARGS)
    echo "tests: phase '$name' took $((SECONDS - began)) s (exit $status)"
    return "$status"
}

status=0
first_failure() { [ "$status" -ne 0 ] || status=$1; }

run_phase local -n "$workers" --dist worksteal --durations=15 -m "not ($PEER_MARKERS)" "$@" || status=$?
if [ "$phases" = all ]; then
    bignode_log=$(mktemp /tmp/dracpu-bignode-lane.XXXXXX)
    bignode_lane() { run_phase bignode --durations=20 -m bignode "$@" >"$bignode_log" 2>&1; }
    lane=""
    if [ "${DRACPU_BIGNODE_BESIDE:-1}" != 0 ]; then
        echo "tests: phase 'bignode' runs beside the next two (log: $bignode_log)"
        bignode_lane "$@" &
        lane=$!
    fi
    run_phase peers --durations=40 -m "$HOST_PEERS" "$@" || first_failure $?
    DRACPU_RUNTIME=crio run_phase crio --durations=10 tests/realnode \
        tests/e2e/test_e2e_scenarios.py::test_grouped_claim_pins_and_the_shared_pool_steps_aside \
        "$@" || first_failure $?
    if [ -n "$lane" ]; then
        waited=$SECONDS
        wait "$lane"
        lane_status=$?
        echo "tests: waited $((SECONDS - waited)) s more for phase 'bignode'"
    else
        bignode_lane "$@"
        lane_status=$?
    fi
    cat "$bignode_log"
    rm -f "$bignode_log"
    first_failure "$lane_status"
fi
exit "$status"
