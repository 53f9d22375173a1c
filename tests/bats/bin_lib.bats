#!/usr/bin/env bats
# bin/lib.sh, the entry points' area file of lib/bash/ct.sh: ct_debian_mirror (read from a
# stub apt-cache's policy), and bin/ scripts logging in the library's format.

load helpers

setup() { worker_setup; }

# policy SOURCE...: a stub apt-cache whose policy lists each "PRIORITY URL SUITE/COMP ORIGIN"
# source with the release line apt prints for it.
policy() {
  local src prio url suite origin out="Package files:\n 100 /var/lib/dpkg/status\n     release a=now\n"
  for src in "$@"; do
    read -r prio url suite origin <<<"$src"
    out+=" $prio $url $suite amd64 Packages\n     release v=1,o=$origin,a=x,n=${suite%/*},l=$origin,c=${suite#*/},b=amd64\n     origin ${url#*://}\n"
  done
  make_stub apt-cache "printf '$out'"
}

mirror() {
  bash -c 'set -euo pipefail; source "$1"; ct_debian_mirror' x "$REPO_ROOT/bin/lib.sh"
}

@test "ct_debian_mirror: Debian's main archive, past the security and updates suites" {
  policy "500 http://security.example/debian-security bookworm-security/main Debian" \
    "500 http://mirror.example/debian bookworm-updates/main Debian" \
    "500 http://mirror.example/debian bookworm/main Debian"
  run mirror
  [ "$status" -eq 0 ]
  assert_equal "$output" "http://mirror.example/debian"
  assert_equal "$(calls apt-cache)" "policy"
}

@test "ct_debian_mirror: any Debian suite's host (trixie on a trixie host), never another distribution's" {
  policy "500 http://archive.ubuntu.com/ubuntu noble/main Ubuntu" \
    "500 http://mirror.example/debian trixie/contrib Debian" \
    "500 https://trixie.example/debian trixie/main Debian"
  run mirror
  assert_equal "$output" "https://trixie.example/debian"
}

@test "ct_debian_mirror: deb.debian.org without a Debian source (the Ubuntu AMI builder) or without apt" {
  policy "500 http://archive.ubuntu.com/ubuntu noble/main Ubuntu"
  run mirror
  [ "$status" -eq 0 ]
  assert_equal "$output" "http://deb.debian.org/debian"
  make_stub apt-cache 'exit 100'
  run mirror
  [ "$status" -eq 0 ]
  assert_equal "$output" "http://deb.debian.org/debian"
}

@test "ct_debian_mirror: CT_FLEET_DEBIAN_MIRROR wins, apt not asked" {
  policy "500 http://mirror.example/debian bookworm/main Debian"
  CT_FLEET_DEBIAN_MIRROR=http://local.example/debian run mirror
  assert_equal "$output" "http://local.example/debian"
  assert_not_called apt-cache
}

@test "bin/ensure-docker: its steps are the library's step lines (ct_fleet.protocol.steplog)" {
  [[ $(id -u) -eq 0 ]] || skip "only root starts and stops dockerd"
  # A state dir of its own: it records no daemon, so stop leaves Docker alone.
  CT_FLEET_DOCKER_STATE="$BATS_TEST_TMPDIR/state" run "$REPO_ROOT/bin/ensure-docker" stop --owner "bats-$TEST_ID"
  [ "$status" -eq 0 ]
  assert_contains "$output" "[ensure-docker] dockerd was not started by ensure-docker: leaving it alone"
  printf '%s\n' "$output" >"$BATS_TEST_TMPDIR/log"
  run python - "$REPO_ROOT/lib" "$BATS_TEST_TMPDIR/log" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from ct_fleet.protocol import steplog
for s in steplog.steps(open(sys.argv[2])):
    print(s.tag, s.name, s.event)
PY
  assert_equal "$output" "$(printf '%s\n' "ensure-docker stop-dockerd start" "ensure-docker stop-dockerd ok")"
}

@test "bin/ensure-docker: a dockerd that dies at start-up fails its step, the reason on the last line" {
  [[ $(id -u) -eq 0 ]] || skip "only root starts and stops dockerd"
  # Docker is no AWS: stand-ins that report recent versions, a daemon that never answers,
  # and a dockerd that exits at once. State and log are the test's own.
  make_stub dockerd '[[ $1 == --version ]] && echo "Docker version 26.1.5, build x"; exit 1'
  make_stub docker 'case $1 in version) echo 26.1.5 ;; compose) echo 2.26.1 ;; *) exit 1 ;; esac'
  CT_FLEET_DOCKER_STATE="$BATS_TEST_TMPDIR/state" CT_FLEET_DOCKER_LOG="$BATS_TEST_TMPDIR/dockerd.log" \
    run "$REPO_ROOT/bin/ensure-docker" start --owner "bats-$TEST_ID"
  [ "$status" -eq 1 ]
  assert_in_order "$output" "[ensure-docker] step start-dockerd: start" "[ensure-docker] step start-dockerd: FAILED (exit 1)"
  [[ ${lines[-1]} == *"[ensure-docker] ERROR: dockerd exited during start-up (log: $BATS_TEST_TMPDIR/dockerd.log)" ]]
  [ ! -e "$BATS_TEST_TMPDIR/state/dockerd.pid" ]
}

# A dockerd stand-in that answers (through the docker stub) while it runs; TERM ends it.
stub_docker_daemon() {
  make_stub dockerd '[[ ${1:-} == --version ]] && { echo "Docker version 26.1.5, build x"; exit 0; }
touch "$STUB_DIR/up"; trap '"'"'rm -f "$STUB_DIR/up"; exit 0'"'"' TERM; while :; do sleep 0.1; done'
  make_stub docker 'case $1 in version) echo 26.1.5 ;; compose) echo 2.26.1 ;; info) [[ -e $STUB_DIR/up ]] ;; *) exit 1 ;; esac'
  export CT_FLEET_DOCKER_STATE="$BATS_TEST_TMPDIR/state" CT_FLEET_DOCKER_LOG="$BATS_TEST_TMPDIR/dockerd.log"
}

# use_docker NAME: a process of its own (left running, its pid in $used) starts Docker as NAME.
use_docker() {
  local n
  bash -c '"$0" start --owner "$1" >>"$2" 2>&1; exec sleep 600' "$REPO_ROOT/bin/ensure-docker" "$1" "$BATS_TEST_TMPDIR/$1.log" &
  used=$!
  for ((n = 0; n < 300; n++)); do
    [[ -e $CT_FLEET_DOCKER_STATE/users/$1 ]] && return 0
    sleep 0.1
  done
  cat "$BATS_TEST_TMPDIR/$1.log" >&2
  return 1
}

@test "bin/ensure-docker: a shared daemon stops only when its last user is done or gone" {
  [[ $(id -u) -eq 0 ]] || skip "only root starts and stops dockerd"
  stub_docker_daemon
  local used first second
  use_docker run-a
  first=$used
  use_docker run-b
  second=$used
  [ "$(grep -c '^$' "$STUB_DIR/dockerd.calls")" -eq 1 ] # one daemon, started once
  run "$REPO_ROOT/bin/ensure-docker" stop --owner run-a
  [ "$status" -eq 0 ]
  assert_contains "$output" "is still used by run-b: leaving it running"
  [ -e "$STUB_DIR/up" ]
  kill "$first" "$second" # run-b is killed: its entry stays, but counts for nothing
  wait "$first" "$second" || true
  run "$REPO_ROOT/bin/ensure-docker" stop --owner run-c
  [ "$status" -eq 0 ]
  assert_contains "$output" "stopped"
  [ ! -e "$STUB_DIR/up" ]
  [ ! -e "$CT_FLEET_DOCKER_STATE/dockerd.pid" ]
}

@test "bin/ensure-docker: an owner that is not a plain name is refused" {
  run "$REPO_ROOT/bin/ensure-docker" stop --owner "../etc"
  [ "$status" -eq 2 ]
}
