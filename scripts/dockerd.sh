#!/usr/bin/env bash
# A private docker engine for the sandbox's docker backend, for CI and development.
#
#   eval "$(bash scripts/dockerd.sh start)"   # installs docker.io if needed, starts dockerd,
#                                             # prints `export DOCKER_HOST=unix://...`
#   bash scripts/dockerd.sh stop
#   bash scripts/dockerd.sh start|stop DIR    # another instance, all of it under DIR
#
# Idempotent: `start` reuses an engine already answering on our socket, `stop` does
# nothing when none runs. The engine keeps everything under DIR (the argument, else
# FLYWHEEL_DOCKERD_DIR, else /tmp/flywheel-dockerd): its own data-root, exec-root (and
# with it its own containerd), socket and pidfile, so it never touches a system docker
# and several instances run side by side (tests/test_docker_hosts.py starts two). No iptables, no bridge (sandbox containers have no
# network). Storage driver overlay2, falling back to vfs where overlay2 cannot mount
# (e.g. inside another overlay filesystem). Works as root or through sudo.
set -euo pipefail
DIR=${2:-${FLYWHEEL_DOCKERD_DIR:-/tmp/flywheel-dockerd}}
SOCK="$DIR/docker.sock"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
log() { echo "dockerd.sh: $*" >&2; }

answers() { DOCKER_HOST="unix://$SOCK" timeout 5 docker version >/dev/null 2>&1; }

write_config() {  # $1 = storage driver
  $SUDO mkdir -p "$DIR"
  cat <<EOF | $SUDO tee "$DIR/daemon.json" >/dev/null
{"data-root": "$DIR/data", "exec-root": "$DIR/exec", "hosts": ["unix://$SOCK"],
 "pidfile": "$DIR/docker.pid", "storage-driver": "$1", "group": "$(id -gn)",
 "iptables": false, "ip-masq": false, "bridge": "none"}
EOF
}

launch() {  # $1 = storage driver; 0 when the engine answers within 60 s
  write_config "$1"
  $SUDO rm -f "$DIR/docker.pid"
  $SUDO setsid dockerd --config-file "$DIR/daemon.json" >>"$DIR/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 60); do
    answers && return 0
    [ -f "$DIR/docker.pid" ] && ! $SUDO kill -0 "$(cat "$DIR/docker.pid")" 2>/dev/null && return 1
    sleep 1
  done
  return 1
}

stop() {
  [ -f "$DIR/docker.pid" ] || return 0
  pid=$(cat "$DIR/docker.pid")
  if $SUDO kill -0 "$pid" 2>/dev/null; then
    DOCKER_HOST="unix://$SOCK" docker ps -aq --filter label=flywheel.sandbox 2>/dev/null \
      | xargs -r env DOCKER_HOST="unix://$SOCK" docker rm -f >/dev/null 2>&1 || true
    $SUDO kill "$pid"
    for _ in $(seq 30); do $SUDO kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    $SUDO kill -9 "$pid" 2>/dev/null || true
  fi
  $SUDO rm -f "$DIR/docker.pid"
  # dockerd bind-mounts its data-root onto itself; one killed hard leaves that mount
  if mountpoint -q "$DIR/data" 2>/dev/null; then $SUDO umount "$DIR/data" 2>/dev/null || $SUDO umount -l "$DIR/data" || true; fi
  log "stopped"
}

start() {
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    log "installing docker.io (apt)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker.io >/dev/null
  fi
  if answers; then
    log "already running on $SOCK"
  elif launch overlay2; then
    log "started (overlay2) on $SOCK"
  else
    log "overlay2 failed ($(tail -n 3 "$DIR/dockerd.log" | tr '\n' ' ')); retrying with vfs"
    stop
    launch vfs || { log "dockerd did not start:"; tail -n 20 "$DIR/dockerd.log" >&2; exit 1; }
    log "started (vfs) on $SOCK"
  fi
  echo "export DOCKER_HOST=unix://$SOCK"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop [DIR]" >&2; exit 2 ;;
esac
