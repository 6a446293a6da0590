# Sourced by the tools that build real peers. Built tools are cached outside the clone, keyed
# by tool and version, so every clone on the machine (and CI right after a session) reuses them:
#   ${DRACPU_CACHE:-$HOME/.cache/dracpu}/<tool>-<version>/bin/...
# A cache entry is complete only when its .complete stamp exists; a half-built entry is rebuilt.
DRACPU_CACHE="${DRACPU_CACHE:-${HOME:-/root}/.cache/dracpu}"
export PATH="$PATH:/usr/local/go/bin"

cache_dir() { printf '%s/%s-%s\n' "$DRACPU_CACHE" "$1" "$2"; }
cache_ready() { [[ -f "$(cache_dir "$1" "$2")/.complete" ]]; }
cache_seal() { touch "$(cache_dir "$1" "$2")/.complete"; }
# log PREFIX MESSAGE...: one progress line with the elapsed seconds since the script started
log() { local p="$1"; shift; printf '%s: [%4ss] %s\n' "$p" "$SECONDS" "$*" >&2; }
need_go() {
    if ! command -v go >/dev/null 2>&1; then
        echo "$1: go not found on PATH or in /usr/local/go/bin; cannot build" >&2
        exit 1
    fi
}
