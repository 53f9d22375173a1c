#!/usr/bin/env bats
# worker/fetch-secrets.sh: SSM SecureString $SECRET_PREFIX/<instance>/secrets[.N] -> secrets.env (0600).

load helpers

# Values with spaces, both quotes, $, backslash and backtick: they must survive `source`.
ANTHROPIC_VALUE='sk-ant BATS-SECRET-ONE "double" '\''single'\'' $HOME \n `id` ;&|'
GH_VALUE='ghp_BATS-SECRET-TWO  two  spaces '

setup_file() { start_moto; }
teardown_file() { stop_moto; }

setup() {
  worker_setup
  PREFIX="/linuxbench/bats/$TEST_ID"
  SECRETS="$LB_HOME/etc/linuxbench/secrets.env"
  fleet_env "SECRET_NAMES=ANTHROPIC_API_KEY GH_TOKEN" "SECRET_PREFIX=$PREFIX" "AWS_REGION=$TEST_REGION"
}

# check_secrets_file: secrets.env is 0600 and sourcing it gives back both values exactly.
check_secrets_file() {
  [ -f "$SECRETS" ]
  assert_equal "$(stat -c %a "$SECRETS")" 600
  run bash -c 'set -eu; source "$1"; printf "%s\n%s" "$ANTHROPIC_API_KEY" "$GH_TOKEN"' check "$SECRETS"
  [ "$status" -eq 0 ]
  assert_equal "${lines[0]}" "$ANTHROPIC_VALUE"
  assert_equal "${lines[1]}" "$GH_VALUE"
}

@test "fetch-secrets: (re)writes secrets.env, mode 600, values intact, never printed" {
  put_bundle "$PREFIX" 0 1 ANTHROPIC_API_KEY "$ANTHROPIC_VALUE" GH_TOKEN "$GH_VALUE" OTHER_FLEET_KEY leftover
  # A rerun rewrites the file: nothing of an earlier one survives.
  echo "export STALE=1" >"$SECRETS"

  run "$WORKER_DIR/fetch-secrets.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "fetched secrets: ANTHROPIC_API_KEY GH_TOKEN"
  refute_contains "$output" "BATS-SECRET-ONE"
  refute_contains "$output" "BATS-SECRET-TWO"
  [ ! -e "$SECRETS.tmp" ]
  refute_contains "$(cat "$SECRETS")" "STALE"
  # Only the names the fleet forwards become variables.
  refute_contains "$(cat "$SECRETS")" "OTHER_FLEET_KEY"
  check_secrets_file
}

@test "fetch-secrets: secrets that overflow one parameter are read from all of them" {
  put_bundle "$PREFIX" 0 3 ANTHROPIC_API_KEY "$ANTHROPIC_VALUE"
  put_bundle "$PREFIX" 1 3 GH_TOKEN "$GH_VALUE"
  put_bundle "$PREFIX" 2 3 DOCKER_ORG_PAT pat-three
  fleet_env "SECRET_NAMES=ANTHROPIC_API_KEY DOCKER_ORG_PAT GH_TOKEN"
  run "$WORKER_DIR/fetch-secrets.sh"
  [ "$status" -eq 0 ]
  check_secrets_file
  assert_equal "$(source "$SECRETS" && echo "$DOCKER_ORG_PAT")" pat-three
}

@test "fetch-secrets: a missing overflow parameter is waited for, then fails" {
  put_bundle "$PREFIX" 0 2 ANTHROPIC_API_KEY "$ANTHROPIC_VALUE" GH_TOKEN "$GH_VALUE"
  SECRETS_WAIT=1 run "$WORKER_DIR/fetch-secrets.sh"
  [ "$status" -eq 1 ]
  assert_contains "$output" "not readable under $PREFIX/$INSTANCE_ID"
  [ ! -e "$SECRETS" ]
}

@test "fetch-secrets: waits for secrets the controller writes after launch" {
  fleet_env "SECRET_NAMES=GH_TOKEN"
  # GH_TOKEN lands once the first read has missed it, while the step waits to read again
  # (its sleep, recorded by a stub that then sleeps): a retry finds it.
  local real_sleep
  real_sleep=$(command -v sleep)
  make_stub sleep "exec $real_sleep \"\$@\""
  (
    for _ in $(seq 1200); do
      [[ -s $STUB_DIR/sleep.calls ]] && break
      "$real_sleep" 0.05
    done
    put_bundle "$PREFIX" 0 1 GH_TOKEN "$GH_VALUE"
  ) 3>&- &
  local put=$!
  SECRETS_WAIT=60 run "$WORKER_DIR/fetch-secrets.sh"
  wait "$put"
  [ "$status" -eq 0 ]
  [ -s "$STUB_DIR/sleep.calls" ] # it did miss once and wait
  assert_equal "$(source "$SECRETS" && echo "$GH_TOKEN")" "$GH_VALUE"
  assert_equal "$(stat -c %a "$SECRETS")" 600
}

@test "fetch-secrets: a missing secret fails after SECRETS_WAIT, writing nothing" {
  put_bundle "$PREFIX" 0 1 ANTHROPIC_API_KEY "$ANTHROPIC_VALUE"
  local start=$SECONDS
  SECRETS_WAIT=2 run "$WORKER_DIR/fetch-secrets.sh"
  [ "$status" -eq 1 ]
  [ $((SECONDS - start)) -ge 2 ]
  assert_contains "$output" "secrets ANTHROPIC_API_KEY GH_TOKEN not readable under $PREFIX/$INSTANCE_ID"
  refute_contains "$output" "BATS-SECRET-ONE"
  [ ! -e "$SECRETS" ]
  [ ! -e "$SECRETS.tmp" ]
}

@test "fetch-secrets: no SECRET_NAMES writes an empty 0600 file without calling AWS" {
  : >"$FLEET_ENV"
  fleet_env "SECRET_NAMES=" "SECRET_PREFIX=$PREFIX"
  # A dead endpoint proves no AWS call is made.
  AWS_ENDPOINT_URL=http://127.0.0.1:9 run "$WORKER_DIR/fetch-secrets.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "no secrets for this fleet"
  [ -f "$SECRETS" ]
  [ ! -s "$SECRETS" ]
  assert_equal "$(stat -c %a "$SECRETS")" 600
}

@test "fetch-secrets: a multi-line value (a PEM key) with tabs survives exactly" {
  fleet_env "SECRET_NAMES=GH_TOKEN"
  local pem=$'-----BEGIN KEY-----\nline\tone\nline two\n-----END KEY-----'
  put_bundle "$PREFIX" 0 1 GH_TOKEN "$pem"
  run "$WORKER_DIR/fetch-secrets.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(source "$SECRETS" && printf '%s' "$GH_TOKEN")" "$pem"
}
