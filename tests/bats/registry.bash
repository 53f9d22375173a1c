# shellcheck shell=bash
# A real Docker registry for the bats tests of docker-login.sh and pull-images.sh: Debian's
# docker-registry (distribution v2) on 127.0.0.1 with htpasswd (bcrypt) auth, and a private
# dockerd per .bats file (its own data root and socket), so a test may pull, prune and log
# in without touching the machine's Docker images or root's ~/.docker. Docker treats
# 127.0.0.0/8 registries as insecure (plain HTTP) by default.
#
# Usage, after `load helpers` (bats 1.8 cannot skip from setup_file, so setup skips):
#   load registry
#   setup_file() {
#     require_docker
#     [[ -n $DOCKER_SKIP ]] && return 0
#     start_moto; start_registry USER PASSWORD; start_private_dockerd
#   }
#   teardown_file() { stop_private_dockerd; stop_registry; stop_moto; release_docker; }
#   setup() { skip_without_docker; worker_setup; }
# Exports REGISTRY (host:port) and DOCKER_HOST (the private daemon) to the tests.

# The owner name bin/ensure-docker records when this file starts dockerd.
docker_owner() {
  echo "bats-${BATS_TEST_FILENAME##*/}"
}

# Docker >= 24.0.6 with compose, running (bin/ensure-docker installs and starts it as
# root). Only where Docker cannot be had (not root: ensure-docker exits 2) does it export
# DOCKER_SKIP, the reason every test then skips with; any other failure fails the file.
# The registry tools come from bin/test (apt-get install docker-registry apache2-utils).
require_docker() {
  local out rc=0 tool
  export DOCKER_SKIP=""
  out=$("$REPO_ROOT/bin/ensure-docker" start --owner "$(docker_owner)" 2>&1) || rc=$?
  if ((rc == 2)); then
    DOCKER_SKIP="no Docker here: ${out##*$'\n'}"
    return 0
  elif ((rc != 0)); then
    printf '%s\n' "$out" >&2
    return 1
  fi
  for tool in docker-registry htpasswd setpriv; do
    command -v "$tool" >/dev/null 2>&1 && continue
    if [[ $(id -u) -ne 0 ]]; then
      DOCKER_SKIP="no $tool, and not root to install it (docker-registry, apache2-utils)"
      return 0
    fi
    echo "$tool is missing: run bin/test once, or apt-get install docker-registry apache2-utils" >&2
    return 1
  done
}

skip_without_docker() {
  if [[ -n ${DOCKER_SKIP:-} ]]; then
    skip "$DOCKER_SKIP"
  fi
}

# Stop dockerd if require_docker started it (a bats file run alone); under bin/test the
# daemon belongs to bin/test and stays up.
release_docker() {
  "$REPO_ROOT/bin/ensure-docker" stop --owner "$(docker_owner)" >/dev/null 2>&1 || true
}

# start_registry USER PASSWORD: a registry accepting only USER/PASSWORD (bcrypt htpasswd).
start_registry() {
  local user=$1 password=$2 dir="$BATS_FILE_TMPDIR/registry" port attempt _
  mkdir -p "$dir/store"
  printf '%s' "$password" | htpasswd -iBc "$dir/htpasswd" "$user" 2>/dev/null
  for attempt in 1 2 3; do
    port=$(free_port)
    cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/store
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
auth:
  htpasswd:
    realm: ct-fleet-bats
    path: $dir/htpasswd
EOF
    # fd 3 closed: bats waits for it, and a background server would hold it open.
    docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 3>&- &
    export REGISTRY_PID=$! REGISTRY="127.0.0.1:$port"
    for _ in $(seq 100); do
      # Up and asking for credentials.
      [[ $(curl -s -o /dev/null -w '%{http_code}' "http://$REGISTRY/v2/") == 401 ]] && return 0
      kill -0 "$REGISTRY_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill "$REGISTRY_PID" 2>/dev/null || true
    echo "registry did not start on port $port (attempt $attempt):" >&2
    cat "$dir/log" >&2
  done
  return 1
}

stop_registry() {
  stop_pid "${REGISTRY_PID:-}"
}

# A dockerd of this file's own: data root, exec root and socket in a short /tmp dir (unix
# socket paths are limited to 108 bytes), no bridge, no iptables. The dir is world-
# traversable so that a worker user in the docker group can reach the socket.
start_private_dockerd() {
  local dir _
  dir=$(mktemp -d /tmp/ct-bats-dockerd.XXXXXX)
  chmod 0755 "$dir"
  export PRIVATE_DOCKERD_DIR="$dir"
  dockerd --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
    -H "unix://$dir/docker.sock" --bridge=none --iptables=false --ip6tables=false \
    >"$dir/dockerd.log" 2>&1 </dev/null 3>&- &
  export PRIVATE_DOCKERD_PID=$! DOCKER_HOST="unix://$dir/docker.sock"
  for _ in $(seq 300); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$PRIVATE_DOCKERD_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "private dockerd did not start:" >&2
  tail -n 20 "$dir/dockerd.log" >&2
  return 1
}

stop_private_dockerd() {
  [[ -n ${PRIVATE_DOCKERD_DIR:-} ]] || return 0
  stop_pid "${PRIVATE_DOCKERD_PID:-}" 300
  rm -rf "$PRIVATE_DOCKERD_DIR"
}

# stop_pid PID [TENTHS]: TERM, wait up to TENTHS/10 s (default 5 s), then KILL.
stop_pid() {
  local pid=$1 tenths=${2:-50} _
  [[ -n $pid ]] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq "$tenths"); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

# push_image REF USER PASSWORD: a one-file image (no binaries needed to push or pull; a
# new digest at every push) imported into the daemon at DOCKER_HOST, pushed with a
# throwaway login, then removed from that daemon.
push_image() {
  local ref=$1 user=$2 password=$3 dir
  dir=$(mktemp -d "$BATS_FILE_TMPDIR/image.XXXXXX")
  mkdir -p "$dir/root"
  echo "$ref pushed at $(date +%s%N)" >"$dir/root/IMAGE"
  tar -C "$dir/root" -c . | docker import - "$ref" >/dev/null
  printf '%s' "$password" | DOCKER_CONFIG="$dir/config" docker login "${ref%%/*}" \
    --username "$user" --password-stdin >/dev/null 2>&1
  DOCKER_CONFIG="$dir/config" docker push --quiet "$ref" >/dev/null
  docker image rm "$ref" >/dev/null
  rm -rf "$dir"
}

# as_worker USER COMMAND...: run COMMAND as USER with the docker group (the way a worker
# user in the docker group runs), HOME where it cannot read root's ~/.docker.
as_worker() {
  local user=$1
  shift
  setpriv --reuid="$user" --regid=docker --clear-groups env HOME=/nonexistent "$@"
}
