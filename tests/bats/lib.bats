#!/usr/bin/env bats
# worker/lib.sh: paths under LB_HOME, fleet.env, timed steps, lb_aws, lb_instance_id, lb_require.

load helpers

setup_file() { start_moto; }
teardown_file() { stop_moto; }
setup() { worker_setup; }

# lib BASH_CODE: run BASH_CODE in a fresh bash that sourced worker/lib.sh.
lib() {
  bash -c 'set -euo pipefail; source "$1"; eval "$2"' lib "$WORKER_DIR/lib.sh" "$1"
}

@test "lib.sh: every path lives under LB_HOME and fleet.env is read" {
  fleet_env FLEET_ID=fleet-one "SETTINGS=toyarena other"
  run lib 'echo "$LB_ROOT|$LB_ETC|$LB_LOG|$LB_EXTRA|$LB_SETUP_ENV|$LB_VENV|$FLEET_ID|$SETTINGS"'
  [ "$status" -eq 0 ]
  assert_equal "$output" "$LB_HOME/opt/linuxbench|$LB_HOME/etc/linuxbench|$LB_HOME/var/log/linuxbench-bootstrap.log|$LB_HOME/opt/linuxbench-extra|$LB_HOME/opt/linuxbench-worker-setup.env|$LB_HOME/opt/linuxbench/.venv|fleet-one|toyarena other"
}

@test "lib.sh: CT_FLEET_VENV (a local instance) overrides the venv" {
  CT_FLEET_VENV=/some/venv run lib 'echo "$LB_VENV"'
  [ "$status" -eq 0 ]
  assert_equal "$output" /some/venv
}

@test "lb_timed: logs start and ok with the duration, returns 0" {
  run lib 'LB_STEP=demo lb_timed demo echo hello'
  [ "$status" -eq 0 ]
  assert_equal "${#lines[@]}" 3
  [[ ${lines[0]} =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z\ \[demo\]\ step\ demo:\ start$ ]]
  assert_equal "${lines[1]}" hello
  [[ ${lines[2]} =~ \[demo\]\ step\ demo:\ ok\ in\ [0-9]+s$ ]]
}

@test "lb_timed: a failing command logs FAILED with its exit code and returns it" {
  run lib 'lb_timed demo bash -c "exit 7"'
  [ "$status" -eq 7 ]
  assert_contains "$output" "step demo: start"
  [[ $output =~ step\ demo:\ FAILED\ \(exit\ 7\)\ after\ [0-9]+s ]]
  refute_contains "$output" "step demo: ok"
}

@test "lb_timed: counts the seconds a step takes" {
  run lib 'lb_timed nap sleep 1.1'
  [ "$status" -eq 0 ]
  [[ $output =~ step\ nap:\ ok\ in\ ([0-9]+)s ]]
  [ "${BASH_REMATCH[1]}" -ge 1 ]
}

@test "lb_log: without LB_STEP the script name is the tag, on stderr" {
  run bash -c 'source "$1"; lb_log "a message" 2>&1 >/dev/null' my-step.sh "$WORKER_DIR/lib.sh"
  [ "$status" -eq 0 ]
  [[ $output =~ \[my-step.sh\]\ a\ message$ ]]
  run bash -c 'source "$1"; lb_log "a message" 2>/dev/null' my-step.sh "$WORKER_DIR/lib.sh"
  assert_equal "$output" ""
}

@test "lb_aws: without AWS_ENDPOINT_URL no --endpoint-url is passed (real AWS)" {
  run env -u AWS_ENDPOINT_URL bash -c 'source "$1"; set -x; lb_aws --version' lib "$WORKER_DIR/lib.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "+ aws --region us-east-1 --version"
  refute_contains "$output" "--endpoint-url"
}

@test "lb_aws: passes --endpoint-url and --region; reaches moto even for sqs, which CLI v1 sends to AWS" {
  run lib "set -x; lb_aws sqs create-queue --queue-name lb-bats-$TEST_ID --query QueueUrl --output text"
  [ "$status" -eq 0 ]
  assert_contains "$output" "+ aws --endpoint-url $MOTO_URL --region us-east-1 sqs create-queue"
  output=${lines[${#lines[@]} - 1]}
  # Only moto hands out queue URLs on its own address.
  assert_equal "$output" "$MOTO_URL/123456789012/lb-bats-$TEST_ID"
}

@test "lb_instance_id: uses INSTANCE_ID when the launcher set it (no IMDS)" {
  INSTANCE_ID=i-0123456789abcdef0 run lib 'lb_instance_id'
  [ "$status" -eq 0 ]
  assert_equal "$output" i-0123456789abcdef0
}

@test "lb_require: names the missing setting and the fleet.env path, exit 1" {
  fleet_env BUCKET=b
  run lib 'lb_require BUCKET FLEET_ID; echo reached'
  [ "$status" -eq 1 ]
  assert_contains "$output" "ERROR: FLEET_ID is not set (is $FLEET_ENV present?)"
  refute_contains "$output" reached
  fleet_env FLEET_ID=f
  run lib 'lb_require BUCKET FLEET_ID; echo reached'
  [ "$status" -eq 0 ]
  assert_equal "$output" reached
}
