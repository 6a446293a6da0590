# Sourced by every script under tools/: progress lines and errors, the cache of built tools,
# and processes tracked by PID file. A script sets LOG_PREFIX (its name in every line) before
# or after sourcing; it defaults to the script's file name.
#
# Built tools are cached outside the clone, keyed by tool and version, so every clone on the
# machine (and CI right after a session) reuses them:
#   ${DRACPU_CACHE:-$HOME/.cache/dracpu}/<tool>-<version>/bin/...
# A cache entry is complete only when its .complete stamp exists; a half-built entry is rebuilt.
DRACPU_CACHE="${DRACPU_CACHE:-${HOME:-/root}/.cache/dracpu}"
LOG_PREFIX="${LOG_PREFIX:-$(basename "${0%.sh}")}"
export PATH="$PATH:/usr/local/go/bin"

cache_dir() { printf '%s/%s-%s\n' "$DRACPU_CACHE" "$1" "$2"; }
cache_ready() { [[ -f "$(cache_dir "$1" "$2")/.complete" ]]; }
cache_seal() { touch "$(cache_dir "$1" "$2")/.complete"; }

# project_version: the release version, pyproject.toml's `[project] version` (the one place it
# is written; Chart.yaml's appVersion, the Dockerfile and compose repeat it, held to it by a
# packaging test); it is the images' tag
project_version() {
    sed -n '/^\[project\]/,/^\[/s/^version = "\(.*\)"$/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../pyproject.toml"
}
# chart_version: the same version in Semantic Versioning, as helm wants the chart's `version`
# (tools/chart-version.py: 0.3.0.dev0 is 0.3.0-dev.0; a final release is spelt the same)
chart_version() {
    python3 "$(dirname "${BASH_SOURCE[0]}")/chart-version.py" "$(project_version)"
}

# log PREFIX MESSAGE...: one progress line with the elapsed seconds since the script started
log() { local p="$1"; shift; printf '%s: [%4ss] %s\n' "$p" "$SECONDS" "$*" >&2; }
# say MESSAGE...: a progress line of this script
say() { log "$LOG_PREFIX" "$*"; }
# die MESSAGE...: one error line, exit 2
die() { echo "$LOG_PREFIX: error: $*" >&2; exit 2; }

# with_heartbeat PREFIX WHAT COMMAND...: runs COMMAND, printing a line every minute while it
# runs (a long build is not mistaken for a hung one); its exit status is COMMAND's.
with_heartbeat() {
    local p="$1" what="$2" began=$SECONDS ticker status=0
    shift 2
    (
        trap 'kill "$nap" 2>/dev/null; exit 0' TERM
        while :; do
            sleep "${HEARTBEAT_SECONDS:-60}" &
            nap=$!
            wait "$nap"
            log "$p" "$what: still running ($((SECONDS - began)) s)"
        done
    ) &
    ticker=$!
    "$@" || status=$?
    kill "$ticker" 2>/dev/null
    wait "$ticker" 2>/dev/null || true
    return "$status"
}

need_go() {
    if ! command -v go >/dev/null 2>&1; then
        echo "$1: go not found on PATH or in /usr/local/go/bin; cannot build" >&2
        exit 1
    fi
}

# pid_recorded PIDFILE MARKER: prints the PID recorded in PIDFILE when that process is alive and
# its command line contains MARKER; a recycled PID belongs to some other program. A process in
# the middle of an exec shows an empty command line for a moment: it is read again before the
# process is taken for gone (a zombie's stays empty).
pid_recorded() {
    local file="$1" marker="$2" pid cmdline="" i
    [[ -f "$file" ]] || return 1
    pid="$(cat "$file")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    for ((i = 0; i < 40; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        cmdline="$(command_line "$pid")"
        [[ -z "$cmdline" ]] || break
        sleep 0.05
    done
    [[ "$cmdline" == *"$marker"* ]] || return 1
    echo "$pid"
}

# command_line PID: the process's arguments separated by spaces ('' while it has none to show).
command_line() { tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null || true; }

# start_recorded PIDFILE LOGFILE MARKER COMMAND...: runs COMMAND detached (its own session),
# output appended to LOGFILE, PID in PIDFILE. Returns once the child runs COMMAND itself (its
# command line shows MARKER and is no longer setsid's, which execs COMMAND in the same process):
# until then pid_recorded would take it for a stranger, and on a loaded machine that takes a
# while.
start_recorded() {
    local file="$1" logfile="$2" marker="$3" pid i cmdline
    shift 3
    setsid "$@" >>"$logfile" 2>&1 </dev/null &
    pid=$!
    echo "$pid" > "$file"
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        cmdline="$(command_line "$pid")"
        [[ "$cmdline" == *"$marker"* && "$cmdline" != "setsid "* ]] && break
        sleep 0.05
    done
}

# stop_recorded PIDFILE MARKER NAME SECONDS: TERM the recorded process (only if it is ours),
# KILL it after SECONDS; the PID file is removed either way.
stop_recorded() {
    local file="$1" marker="$2" name="$3" limit="$4" pid i
    if pid="$(pid_recorded "$file" "$marker")"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < limit * 10; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            say "$name (pid $pid) did not stop in $limit s; KILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        say "stopped $name (pid $pid)"
    fi
    rm -f "$file"
}
