#!/usr/bin/env bats
# worker/docker-login.sh against a real registry (docker-registry on 127.0.0.1, htpasswd
# auth) and a private dockerd: credentials from secrets.env or SSM (moto), root's login
# and the worker user's own, a refused PAT, and a log that holds only registry and user.

load helpers
load registry

ORG=bats-org
PAT='dckr_pat_BATS-DOCKER-PAT with space'

setup_file() {
  require_docker
  [[ -n $DOCKER_SKIP ]] && return 0
  start_moto
  start_registry "$ORG" "$PAT"
  start_private_dockerd
  export PRIVATE_IMAGE="$REGISTRY/bats/private-env:1"
  push_image "$PRIVATE_IMAGE" "$ORG" "$PAT"
  # World-traversable, so the worker user (nobody) reaches its config dir inside.
  WORKER_TOP=$(mktemp -d /tmp/ct-bats-worker.XXXXXX)
  chmod 0755 "$WORKER_TOP"
  export WORKER_TOP
}

teardown_file() {
  rm -rf "${WORKER_TOP:-/nonexistent}"
  stop_private_dockerd
  stop_registry
  stop_moto
  release_docker
}

setup() {
  skip_without_docker
  worker_setup
  SECRETS="$LB_HOME/etc/linuxbench/secrets.env"
  fleet_env "AWS_REGION=$TEST_REGION" "DOCKER_REGISTRY=$REGISTRY"
  # Root's client config: per test, never the machine's ~/.docker.
  export DOCKER_CONFIG="$BATS_TEST_TMPDIR/root-docker"
  export LB_WORKER_DOCKER_CONFIG="$WORKER_TOP/$TEST_ID/docker"
  docker image rm --force "$PRIVATE_IMAGE" >/dev/null 2>&1 || true
}

secrets_env() {
  printf 'export DOCKER_ORG_NAME=%q\nexport DOCKER_ORG_PAT=%q\n' "$1" "$2" >"$SECRETS"
}

# The log is exactly one line naming the registry and the user: no PAT, no auth blob,
# none of docker's own chatter.
assert_log_names_only() {
  local line="$1" auth
  auth=$(printf '%s:%s' "$ORG" "$PAT" | base64 -w0)
  [[ $output =~ ^[0-9TZ:-]+\ \[docker-login.sh\]\ (.*)$ ]] || {
    printf 'unexpected log:\n%s\n' "$output" >&2
    return 1
  }
  assert_equal "${BASH_REMATCH[1]}" "$line"
  refute_contains "$output" "BATS-DOCKER-PAT"
  refute_contains "$output" "$auth"
}

# pull_with CONFIG_DIR: pull the private image with that client config (as root).
pull_with() {
  DOCKER_CONFIG="$1" docker pull --quiet "$PRIVATE_IMAGE"
}

@test "docker-login: the registry refuses an anonymous pull (the image is private)" {
  run pull_with "$BATS_TEST_TMPDIR/empty-config"
  [ "$status" -ne 0 ]
  assert_contains "$output" "no basic auth credentials"
}

@test "docker-login: no credentials anywhere: skipped, no login written" {
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "no Docker registry credentials: skipping docker login"
  [ ! -e "$DOCKER_CONFIG/config.json" ]
}

@test "docker-login: credentials from secrets.env: root can pull; the log names registry and user only" {
  secrets_env "$ORG" "$PAT"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_log_names_only "docker logged in to $REGISTRY as $ORG"
  [ "$(jq -r --arg r "$REGISTRY" '.auths | has($r)' "$DOCKER_CONFIG/config.json")" = true ]
  run pull_with "$DOCKER_CONFIG"
  [ "$status" -eq 0 ]
}

@test "docker-login: credentials from the SSM parameters named in fleet.env" {
  awsm ssm put-parameter --type String --name "/linuxbench/bats/$TEST_ID/docker-org-name" --value "$ORG" >/dev/null 3>&- &
  local put=$!
  ssm_secret "/linuxbench/bats/$TEST_ID/docker-org-pat" "$PAT"
  wait "$put"
  fleet_env "DOCKER_ORG_NAME_SSM_PARAM=/linuxbench/bats/$TEST_ID/docker-org-name" \
    "DOCKER_ORG_PAT_SSM_PARAM=/linuxbench/bats/$TEST_ID/docker-org-pat"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_log_names_only "docker logged in to $REGISTRY as $ORG"
  run pull_with "$DOCKER_CONFIG"
  [ "$status" -eq 0 ]
}

@test "docker-login: SSM parameters that do not exist: skipped, not failed" {
  fleet_env "DOCKER_ORG_NAME_SSM_PARAM=/linuxbench/bats/$TEST_ID/missing-name" \
    "DOCKER_ORG_PAT_SSM_PARAM=/linuxbench/bats/$TEST_ID/missing-pat"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "skipping docker login"
  [ ! -e "$DOCKER_CONFIG/config.json" ]
}

@test "docker-login: a bad PAT is a clearly FAILED step; the PAT stays out of the log" {
  secrets_env "$ORG" "$PAT-but-wrong"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 1 ]
  assert_contains "$output" "ERROR: docker login to $REGISTRY as $ORG FAILED: "
  assert_contains "$output" "401 Unauthorized"
  refute_contains "$output" "BATS-DOCKER-PAT"
  refute_contains "$output" "docker logged in"
  [ "$(jq -r '.auths // {} | length' "$DOCKER_CONFIG/config.json" 2>/dev/null || echo 0)" = 0 ]
  # Under the bootstrap's step wrapper it is a FAILED step.
  run bash -c "set -e; source '$WORKER_DIR/lib.sh'; ct_step docker-login '$WORKER_DIR/docker-login.sh'"
  [ "$status" -eq 1 ]
  assert_contains "$output" "step docker-login: FAILED (exit 1)"
  refute_contains "$output" "BATS-DOCKER-PAT"
}

@test "docker-login: WORKER_USER gets its own login and pulls a private image with it" {
  secrets_env "$ORG" "$PAT"
  fleet_env "WORKER_USER=nobody"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_log_names_only "docker logged in to $REGISTRY as $ORG (root and worker user nobody)"
  assert_equal "$(stat -c '%U %a' "$LB_WORKER_DOCKER_CONFIG")" "nobody 700"
  assert_equal "$(stat -c '%U %a' "$LB_WORKER_DOCKER_CONFIG/config.json")" "nobody 600"
  # nobody, in the docker group, with the DOCKER_CONFIG run-worker.sh gives the jobs.
  run as_worker nobody DOCKER_CONFIG="$LB_WORKER_DOCKER_CONFIG" docker pull --quiet "$PRIVATE_IMAGE"
  [ "$status" -eq 0 ]
  docker image rm "$PRIVATE_IMAGE" >/dev/null
  # Without it, the same user is anonymous and refused: the login is what lets it pull.
  run as_worker nobody DOCKER_CONFIG="$WORKER_TOP/$TEST_ID/none" docker pull --quiet "$PRIVATE_IMAGE"
  [ "$status" -ne 0 ]
  assert_contains "$output" "no basic auth credentials"
  # Rerunnable: a second login rewrites config.json and gives it back to the user.
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(stat -c '%U' "$LB_WORKER_DOCKER_CONFIG/config.json")" nobody
  run as_worker nobody DOCKER_CONFIG="$LB_WORKER_DOCKER_CONFIG" docker pull --quiet "$PRIVATE_IMAGE"
  [ "$status" -eq 0 ]
}

@test "docker-login: a WORKER_USER not created yet: worker-setup.sh gives it the login later" {
  secrets_env "$ORG" "$PAT"
  fleet_env "WORKER_USER=ct-bats-no-such-user"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_log_names_only "docker logged in to $REGISTRY as $ORG (root and worker user ct-bats-no-such-user)"
  assert_equal "$(stat -c '%U %a' "$LB_WORKER_DOCKER_CONFIG")" "root 700"
  [ "$(jq -r --arg r "$REGISTRY" '.auths | has($r)' "$LB_WORKER_DOCKER_CONFIG/config.json")" = true ]
}
