#!/usr/bin/env bash
# The real-engine tier: a Docker Engine (>= 25) and compose v2 on a bare Debian bookworm host
# that reaches only the Debian mirror and PyPI, with nothing installed system-wide but runc,
# tini and debootstrap.
#
#   tools/tier-docker.sh bootstrap   engine + compose from a newer Debian release's packages,
#                                    unpacked into the cache; a Debian base image with python3
#                                    made by debootstrap and cached as an archive
#   tools/tier-docker.sh start       dockerd on a private socket and data root (idempotent)
#   tools/tier-docker.sh stop        stops that dockerd by its PID (idempotent)
#   tools/tier-docker.sh env         prints DOCKER_HOST=, DOCKER_CONFIG=, PATH= and BASE_IMAGE= lines
#   tools/tier-docker.sh base        imports the base image into the running engine, prints it
#   tools/tier-docker.sh base-archive
#                                    prints the path of the base image's rootfs archive (an image
#                                    built without the engine takes it as its first layer)
#   tools/tier-docker.sh check       exits 0 when bootstrap is done, else prints what is missing
#   tools/tier-docker.sh images      builds the five service images on the private engine
#                                    (started for it and stopped after when not running), saves
#                                    them into one archive in the cache keyed by a hash of the
#                                    build inputs, and prints its absolute path as the last line
#
# Everything but that path goes to stderr. The engine runs with --iptables=false
# --ip-forward=false --ip-masq=false: containers reach nothing past this host, and the builds
# need nothing (wheels are prepared on the host, see tools/build-images.sh).
# DRACPU_DOCKER_STATE (default /tmp/dracpu-docker) holds the socket, PID file and data root;
# no default bridge is made (--bridge=none) and compose networks come from DRACPU_DOCKER_POOL,
# so several private engines can run side by side.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
source "$HERE/lib.sh"

NEWER_SUITE="${DRACPU_DOCKER_SUITE:-trixie}"
BASE_SUITE="${DRACPU_BASE_SUITE:-bookworm}"
STATE="${DRACPU_DOCKER_STATE:-/tmp/dracpu-docker}"
SOCK="$STATE/docker.sock"
PIDFILE="$STATE/dockerd.pid"
# Compose networks of this engine: a range of its own, so engines beside it do not overlap.
POOL="${DRACPU_DOCKER_POOL:-10.213.0.0/16}"
# Packages of the locally made base image: Debian's python3 and what TLS and time zones need.
BASE_PACKAGES="python3,ca-certificates,netbase,tzdata"
MIN_ENGINE_MAJOR=25

LOG_PREFIX=tier-docker
skip() { echo "tier-docker: $*; the docker tier is skipped" >&2; exit 0; }

debian_mirror() {
    { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
        2>/dev/null || true; } | grep -oE '^(deb|URIs:) +[^ ]+/debian/?$' | awk '{print $2}' | head -1
}

# The newest-suite apt, kept apart from the system's: its own lists, cache and no status file.
newer_apt() {
    local tool="$1"; shift
    local work="$DRACPU_CACHE/apt-$NEWER_SUITE"
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
    printf 'deb %s %s main\n' "$MIRROR" "$NEWER_SUITE" > "$work/sources.list"
    "$tool" -q -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" \
        -o Dir::State::status=/dev/null -o APT::Sandbox::User=root "$@"
}

engine_dir_file="$DRACPU_CACHE/docker-current"
engine_dir() {
    [[ -f "$engine_dir_file" ]] || return 1
    local dir; dir="$(cat "$engine_dir_file")"
    [[ -f "$dir/.complete" ]] || return 1
    printf '%s\n' "$dir"
}

bootstrap_engine() {
    if dir="$(engine_dir)"; then
        say "engine cached in $dir"
        return
    fi
    say "reading the $NEWER_SUITE package lists from $MIRROR"
    newer_apt apt-get update >/dev/null
    local version
    version="$(newer_apt apt-cache show docker.io 2>/dev/null | awk '/^Version:/ && !v {v = $2} END {print v}')"
    [[ -n "$version" ]] || { echo "tier-docker: no docker.io package in $NEWER_SUITE" >&2; exit 1; }
    version="${version%%+*}"; version="${version#*:}"
    local major="${version%%.*}"
    if (( major < MIN_ENGINE_MAJOR )); then
        echo "tier-docker: $NEWER_SUITE has Docker $version; the tier needs >= $MIN_ENGINE_MAJOR" >&2
        exit 1
    fi
    dir="$(cache_dir docker "$version")"
    rm -rf "$dir"; mkdir -p "$dir/debs" "$dir/root" "$dir/bin" "$dir/config/cli-plugins"
    say "downloading docker.io $version, containerd and docker-compose from $NEWER_SUITE"
    (cd "$dir/debs" && newer_apt apt-get download docker.io containerd docker-compose >/dev/null)
    for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
    for bin in usr/sbin/dockerd usr/sbin/docker-proxy usr/bin/containerd \
        usr/bin/containerd-shim-runc-v2; do
        ln -sf "$dir/root/$bin" "$dir/bin/"
    done
    ln -sf "$(command -v runc)" "$dir/bin/runc"
    ln -sf "$(command -v tini-static || command -v tini)" "$dir/bin/docker-init"
    ln -sf "$dir/root/usr/libexec/docker/cli-plugins/docker-compose" "$dir/config/cli-plugins/"
    rm -rf "$dir/debs"
    touch "$dir/.complete"
    printf '%s\n' "$dir" > "$engine_dir_file"
    say "engine $version unpacked into $dir"
}

# The base image stand-in: a rootfs archive keyed by suite, package list and mirror.
base_key() { printf '%s %s %s v1' "$BASE_SUITE" "$BASE_PACKAGES" "$MIRROR" | sha256sum | cut -c1-12; }
base_archive() { printf '%s/base-%s-%s/rootfs.tar\n' "$DRACPU_CACHE" "$BASE_SUITE" "$(base_key)"; }
base_image() { printf 'localhost/dracpu-base:%s-%s\n' "$BASE_SUITE" "$(base_key)"; }

bootstrap_base() {
    local archive; archive="$(base_archive)"
    local dir; dir="$(dirname "$archive")"
    if [[ -f "$dir/.complete" ]]; then
        say "base image archive cached in $archive"
        return
    fi
    rm -rf "$dir"; mkdir -p "$dir"
    local rootfs="$dir/rootfs"
    say "debootstrap $BASE_SUITE with $BASE_PACKAGES (a few minutes)"
    if ! nice debootstrap --variant=minbase --include="$BASE_PACKAGES" \
        "$BASE_SUITE" "$rootfs" "$MIRROR" > "$dir/debootstrap.log" 2>&1; then
        tail -5 "$dir/debootstrap.log" >&2
        echo "tier-docker: debootstrap failed (log: $dir/debootstrap.log)" >&2
        exit 1
    fi
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
        "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
        "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    for name in python python3; do ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/$name"; done
    : > "$rootfs/etc/resolv.conf"
    tar -C "$rootfs" --numeric-owner -cf "$archive" .
    rm -rf "$rootfs"
    touch "$dir/.complete"
    say "base image archive $archive ($(du -m "$archive" | cut -f1) MB)"
}

cmd_bootstrap() {
    [[ "$(id -u)" == 0 ]] || skip "not root (dockerd needs root)"
    MIRROR="$(debian_mirror)"
    [[ -n "$MIRROR" ]] || skip "no Debian mirror in apt's sources"
    local missing=()
    command -v runc >/dev/null || missing+=(runc)
    command -v tini-static >/dev/null || command -v tini >/dev/null || missing+=(tini)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if ((${#missing[@]})); then
        say "installing ${missing[*]} from apt"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
    command -v docker >/dev/null || skip "no docker client on PATH"
    bootstrap_engine
    bootstrap_base
    bash "$HERE/build-images.sh" wheels >/dev/null
    say "bootstrap done"
}

engine_env() {
    local dir; dir="$(engine_dir)" || { echo "tier-docker: run bootstrap first" >&2; exit 1; }
    export DOCKER_HOST="unix://$SOCK" DOCKER_CONFIG="$dir/config"
    export PATH="$dir/bin:$PATH"
}

engine_up() { docker version >/dev/null 2>&1; }

cmd_start() {
    engine_env
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && engine_up; then
        say "engine already running (pid $(cat "$PIDFILE"), $DOCKER_HOST)"
        return
    fi
    # Leftovers of a killed run: a stale PID file, socket or containerd state.
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        kill "$(cat "$PIDFILE")" 2>/dev/null || true
        wait_gone "$(cat "$PIDFILE")"
    fi
    rm -f "$PIDFILE" "$SOCK"
    mkdir -p "$STATE"
    if [[ -d "$STATE/exec" ]]; then
        # Mounts a killed engine left behind would make the new one fail to start.
        { grep -oE " $STATE/exec[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do
            umount -l "$m" 2>/dev/null || true
        done
        rm -rf "$STATE/exec"
    fi
    say "starting dockerd on $SOCK (data root $STATE/data)"
    setsid nice dockerd --data-root "$STATE/data" --exec-root "$STATE/exec" \
        --pidfile "$PIDFILE" --host "$DOCKER_HOST" --storage-driver overlay2 \
        --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
        --bridge=none --default-address-pool "base=$POOL,size=24" \
        > "$STATE/dockerd.log" 2>&1 < /dev/null &
    local deadline=$((SECONDS + 60))
    until engine_up; do
        if ((SECONDS > deadline)); then
            tail -5 "$STATE/dockerd.log" >&2
            echo "tier-docker: dockerd did not answer within 60 s (log: $STATE/dockerd.log)" >&2
            exit 1
        fi
        sleep 0.5
    done
    say "engine $(docker version --format '{{.Server.Version}}') up, compose $(docker compose version --short)"
}

wait_gone() {
    local pid="$1" deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do
        ((SECONDS > deadline)) && { kill -9 "$pid" 2>/dev/null || true; }
        sleep 0.2
    done
}

cmd_stop() {
    if [[ ! -f "$PIDFILE" ]]; then
        say "engine not running"
        return
    fi
    local pid; pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        wait_gone "$pid"
    fi
    rm -f "$PIDFILE" "$SOCK"
    say "engine stopped"
}

cmd_env() {
    engine_env
    printf 'DOCKER_HOST=%s\nDOCKER_CONFIG=%s\nPATH=%s\n' "$DOCKER_HOST" "$DOCKER_CONFIG" "$PATH"
    printf 'BASE_IMAGE=%s\n' "$(MIRROR="$(debian_mirror)"; base_image)"
}

# Imports the base archive into the private engine under its keyed tag, once.
load_base() {
    local image archive
    image="$(base_image)"; archive="$(base_archive)"
    if docker image inspect "$image" >/dev/null 2>&1; then
        return
    fi
    [[ -f "$(dirname "$archive")/.complete" ]] || { echo "tier-docker: run bootstrap first" >&2; exit 1; }
    say "importing the base image $image"
    docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' "$archive" "$image" >/dev/null
}

cmd_images() {
    [[ "$(id -u)" == 0 ]] || { echo "tier-docker: images needs root (dockerd)" >&2; exit 1; }
    MIRROR="$(debian_mirror)"
    local tag key archive
    tag="$(project_version)"
    key="$(printf '%s %s\n' "$(base_key)" "$(bash "$HERE/build-images.sh" key)" | sha256sum | cut -c1-16)"
    archive="$DRACPU_CACHE/images/dracpu-images-$tag-$key.tar"
    # Checkouts building at once on one machine share the engine and the archive folder: one
    # build at a time, and the engine stopped only by the build that started it.
    mkdir -p "$DRACPU_CACHE/images"
    exec 9>"$DRACPU_CACHE/images/.lock"
    flock 9
    if [[ -f "$archive" ]]; then
        say "images cached in $archive"
        printf '%s\n' "$archive"
        return
    fi
    local started=0
    engine_env
    if ! engine_up; then cmd_start; started=1; fi
    load_base
    BASE_IMAGE="$(base_image)" TAG="$tag" SERVICES="topology allocator dra-plugin nri-plugin api" \
        bash "$HERE/build-images.sh" build >&2
    mkdir -p "$DRACPU_CACHE/images"
    local images=()
    for svc in topology allocator dra-plugin nri-plugin api; do images+=("localhost/dracpu-$svc:$tag"); done
    say "saving ${images[*]}"
    docker save -o "$archive.partial" "${images[@]}"
    mv "$archive.partial" "$archive"
    # Older archives (other build inputs): the newest six stay.
    find "$DRACPU_CACHE/images" -maxdepth 1 -name 'dracpu-images-*.tar' -printf '%T@ %p\n' \
        | sort -rn | tail -n +7 | cut -d' ' -f2- | xargs -r rm -f
    ((started)) && cmd_stop
    say "archive $archive ($(du -m "$archive" | cut -f1) MB)"
    printf '%s\n' "$archive"
}

# Exit 0 when bootstrap has made everything ready; else one line saying what is missing.
cmd_check() {
    [[ "$(id -u)" == 0 ]] || { echo "not root (dockerd needs root)"; exit 1; }
    command -v docker >/dev/null || { echo "no docker client on PATH"; exit 1; }
    engine_dir >/dev/null || { echo "no Docker engine in $DRACPU_CACHE (run make real-peers)"; exit 1; }
    MIRROR="$(debian_mirror)"
    [[ -f "$(dirname "$(base_archive)")/.complete" ]] \
        || { echo "no base image archive in $DRACPU_CACHE (run make real-peers)"; exit 1; }
}

case "${1:-}" in
    bootstrap) cmd_bootstrap ;;
    check) cmd_check ;;
    base) engine_env; MIRROR="$(debian_mirror)"; load_base; base_image ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    env) cmd_env ;;
    images) cmd_images ;;
    base-image) MIRROR="$(debian_mirror)"; base_image ;;
    base-archive) MIRROR="$(debian_mirror)"; base_archive ;;
    *) echo "usage: $0 bootstrap|check|start|stop|env|base|base-image|base-archive|images" >&2; exit 2 ;;
esac
