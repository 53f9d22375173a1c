#!/usr/bin/env bats
# worker/docker-login.sh: docker login with the registry credentials from secrets.env or SSM.

load helpers

PAT='dckr_pat_BATS-DOCKER-PAT with space'

setup_file() { start_moto; }
teardown_file() { stop_moto; }

setup() {
  worker_setup
  SECRETS="$LB_HOME/etc/linuxbench/secrets.env"
  fleet_env "AWS_REGION=$TEST_REGION"
  # docker cannot log in anywhere here: record the call and what it reads on stdin.
  make_stub docker 'cat >>"$STUB_DIR/docker.stdin"'
}

@test "docker-login: no credentials anywhere: skipped, docker never called" {
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "no Docker registry credentials: skipping docker login"
  assert_not_called docker
}

@test "docker-login: credentials from secrets.env, PAT on stdin only" {
  printf 'export DOCKER_ORG_NAME=%q\nexport DOCKER_ORG_PAT=%q\n' bats-org "$PAT" >"$SECRETS"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls docker)" "login --username bats-org --password-stdin"
  assert_equal "$(cat "$STUB_DIR/docker.stdin")" "$PAT"
  assert_contains "$output" "docker logged in as bats-org"
  refute_contains "$output" "BATS-DOCKER-PAT"
}

@test "docker-login: credentials from the SSM parameters named in fleet.env" {
  awsm ssm put-parameter --type String --name "/linuxbench/bats/$TEST_ID/docker-org-name" --value ssm-org >/dev/null 3>&- &
  local put=$!
  ssm_secret "/linuxbench/bats/$TEST_ID/docker-org-pat" "$PAT"
  wait "$put"
  fleet_env "DOCKER_ORG_NAME_SSM_PARAM=/linuxbench/bats/$TEST_ID/docker-org-name" \
    "DOCKER_ORG_PAT_SSM_PARAM=/linuxbench/bats/$TEST_ID/docker-org-pat"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls docker)" "login --username ssm-org --password-stdin"
  assert_equal "$(cat "$STUB_DIR/docker.stdin")" "$PAT"
  refute_contains "$output" "BATS-DOCKER-PAT"
}

@test "docker-login: SSM parameters that do not exist: skipped, not failed" {
  fleet_env "DOCKER_ORG_NAME_SSM_PARAM=/linuxbench/bats/$TEST_ID/missing-name" \
    "DOCKER_ORG_PAT_SSM_PARAM=/linuxbench/bats/$TEST_ID/missing-pat"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "skipping docker login"
  assert_not_called docker
}

@test "docker-login: a refused login fails the step and still hides the PAT" {
  make_stub docker 'cat >/dev/null; echo "Error response from daemon: unauthorized" >&2; exit 1'
  printf 'export DOCKER_ORG_NAME=%q\nexport DOCKER_ORG_PAT=%q\n' bats-org "$PAT" >"$SECRETS"
  run "$WORKER_DIR/docker-login.sh"
  [ "$status" -ne 0 ]
  assert_contains "$output" "unauthorized"
  refute_contains "$output" "docker logged in"
  refute_contains "$output" "BATS-DOCKER-PAT"
  assert_equal "$(calls docker)" "login --username bats-org --password-stdin"
}
