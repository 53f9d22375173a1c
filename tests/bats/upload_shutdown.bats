#!/usr/bin/env bats
# worker/upload-log.sh, worker/shutdown-instance.sh and the embedded cloud's `shutdown`
# shim (lib/ct_fleet/cloud/shims/shutdown), which, without a runner to ask, terminates the instance
# through the EC2 API (the runner's endpoint is tested in tests/worker/test_worker_unit.py).

load helpers

setup_file() {
  start_moto
  make_bucket 3>&- &
  local mb=$!
  # An AMI to launch instances from (moto runs with MOTO_EC2_LOAD_DEFAULT_AMIS=false).
  AMI_ID=$(awsm ec2 register-image --name ct-bats-worker --root-device-name /dev/sda1 \
    --query ImageId --output text)
  export AMI_ID
  wait "$mb"
}
teardown_file() { stop_moto; }

setup() {
  worker_setup
  FLEET="fleet-$TEST_ID"
  fleet_env "BUCKET=$TEST_BUCKET" "FLEET_ID=$FLEET" "AWS_REGION=$TEST_REGION"
}

# instance_states ID...: "ID STATE" lines, sorted.
instance_states() {
  awsm ec2 describe-instances --instance-ids "$@" \
    --query 'Reservations[].Instances[].[InstanceId,State.Name]' --output text | sort
}

@test "upload-log: puts the log at \$FLEET_ID/logs/<instance>-bootstrap.log as text" {
  mkdir -p "$(dirname "$LOG_FILE")"
  printf 'line one\nstep fetch-code: ok in 1s %s\n' "$TEST_ID" >"$LOG_FILE"
  run "$WORKER_DIR/upload-log.sh"
  [ "$status" -eq 0 ]
  local key="$FLEET/logs/$INSTANCE_ID-bootstrap.log"
  assert_contains "$output" "log uploaded to s3://$TEST_BUCKET/$key"
  run awsm s3api get-object --bucket "$TEST_BUCKET" --key "$key" --query ContentType --output text \
    "$BATS_TEST_TMPDIR/downloaded"
  assert_equal "$output" "text/plain"
  assert_equal "$(cat "$BATS_TEST_TMPDIR/downloaded")" "$(cat "$LOG_FILE")"
}

@test "upload-log: no log file fails, naming the path" {
  run "$WORKER_DIR/upload-log.sh"
  [ "$status" -eq 1 ]
  assert_contains "$output" "no log at $LOG_FILE"
}

@test "upload-log: without FLEET_ID it stops before any upload" {
  : >"$FLEET_ENV"
  fleet_env "BUCKET=$TEST_BUCKET"
  mkdir -p "$(dirname "$LOG_FILE")" && echo log >"$LOG_FILE"
  run "$WORKER_DIR/upload-log.sh"
  [ "$status" -eq 1 ]
  assert_contains "$output" "FLEET_ID is not set"
}

@test "shutdown-instance: calls shutdown -h now" {
  make_stub shutdown
  run "$WORKER_DIR/shutdown-instance.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls shutdown)" "-h now"
  assert_contains "$output" "shutting down"
}

@test "shutdown-instance: the secrets file goes before the instance" {
  make_stub shutdown
  mkdir -p "$LB_HOME/etc/linuxbench"
  echo "export GH_TOKEN=x" >"$LB_HOME/etc/linuxbench/secrets.env"
  run "$WORKER_DIR/shutdown-instance.sh"
  [ "$status" -eq 0 ]
  [ ! -e "$LB_HOME/etc/linuxbench/secrets.env" ]
}

@test "shutdown-instance: LB_NO_SHUTDOWN=1 stays up" {
  make_stub shutdown
  mkdir -p "$LB_HOME/etc/linuxbench"
  echo "export GH_TOKEN=x" >"$LB_HOME/etc/linuxbench/secrets.env"
  LB_NO_SHUTDOWN=1 run "$WORKER_DIR/shutdown-instance.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "LB_NO_SHUTDOWN=1: staying up"
  assert_not_called shutdown
  [ -e "$LB_HOME/etc/linuxbench/secrets.env" ]
}

@test "shutdown-instance: a non-root user goes through sudo, whatever else is set" {
  make_stub shutdown
  make_stub sudo
  make_stub id '[[ $1 == -u ]] && { echo 1000; exit 0; }; exec /usr/bin/id "$@"'
  # INSTANCE_ID is no sign of a local instance: only LB_SHUTDOWN changes how to power off.
  INSTANCE_ID=i-0123 run "$WORKER_DIR/shutdown-instance.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls sudo)" "shutdown -h now"
  assert_not_called shutdown
}

@test "shutdown-instance: LB_SHUTDOWN names the program, run as is (no sudo)" {
  make_stub shutdown
  make_stub sudo
  make_stub my-poweroff
  make_stub id '[[ $1 == -u ]] && { echo 1000; exit 0; }; exec /usr/bin/id "$@"'
  LB_SHUTDOWN="$STUB_BIN/my-poweroff" run "$WORKER_DIR/shutdown-instance.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls my-poweroff)" "-h now"
  assert_not_called sudo
  assert_not_called shutdown
}

@test "shutdown shim: with its runner gone, terminates INSTANCE_ID through the EC2 API" {
  local other
  read -r INSTANCE_ID other < <(awsm ec2 run-instances --image-id "$AMI_ID" --count 2 \
    --instance-initiated-shutdown-behavior terminate --query 'Instances[].InstanceId' --output text)
  [[ $INSTANCE_ID == i-* && $other == i-* ]]
  # The endpoint of a runner that is gone: nothing listens there.
  CT_IMDS_ENDPOINT="http://127.0.0.1:1/$INSTANCE_ID" run "$SHIM_DIR/shutdown" -h now
  [ "$status" -eq 0 ]
  assert_equal "$output" "shutdown: terminated $INSTANCE_ID"
  # This instance only.
  assert_equal "$(instance_states "$INSTANCE_ID" "$other")" "$(printf '%s\t%s\n' "$INSTANCE_ID" terminated "$other" running | sort)"
}

@test "shutdown shim: without INSTANCE_ID it refuses" {
  unset INSTANCE_ID
  run "$SHIM_DIR/shutdown" -h now
  [ "$status" -ne 0 ]
  assert_contains "$output" "INSTANCE_ID is not set"
}
