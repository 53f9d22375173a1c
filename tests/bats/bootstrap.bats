#!/usr/bin/env bats
# worker/bootstrap.sh: every step in order with its timing, then the log to S3 and a
# shutdown, on success and on failure alike. The real steps run against moto on a code
# artifact holding the real ct_fleet package and settings, except that its job loop
# (ct_fleet.worker) is a stand-in that prints a marker and exits with $FAKE_WORKER_EXIT.

load helpers

STEPS=(fetch-code install-deps fetch-secrets docker-login worker-setup settings-pull run-worker)
GH_VALUE='ghp_BATS-BOOT-SECRET'

setup_file() {
  start_moto
  make_bucket
  local code="$BATS_FILE_TMPDIR/code"
  mkdir -p "$code/examples"
  cp -r "$REPO_ROOT/lib" "$REPO_ROOT/setup.cfg" "$code/"
  cp -r "$REPO_ROOT/examples/settings" "$code/examples/settings"
  cat >"$code/lib/ct_fleet/worker/__main__.py" <<'EOF'
import os
import sys

print(f"FAKE-WORKER ran on {os.environ['INSTANCE_ID']} for {os.environ['FLEET_ID']}", flush=True)
if os.environ.get("FAKE_WORKER_TOKEN_OUT"):
    with open(os.environ["FAKE_WORKER_TOKEN_OUT"], "w") as out:
        out.write(os.environ.get("GH_TOKEN", ""))
sys.exit(int(os.environ.get("FAKE_WORKER_EXIT", "0")))
EOF
  export BOOT_SHA=0b0075a0b0075a0b0075a0b0075a0b0075a0b007
  make_tarball "$code" "$BATS_FILE_TMPDIR/code.tar.gz"
  s3_put "$BATS_FILE_TMPDIR/code.tar.gz" "artifacts/$BOOT_SHA.tar.gz"
}
teardown_file() { stop_moto; }

# The code already in place (a reboot, or the user-data fetched it): fetch-code skips.
preseed_code() {
  mkdir -p "$LB_ROOT_DIR"
  tar -xzf "$BATS_FILE_TMPDIR/code.tar.gz" -C "$LB_ROOT_DIR"
  echo "$BOOT_SHA" >"$LB_ROOT_DIR/.code-sha"
}

setup() {
  worker_setup
  FLEET="fleet-$TEST_ID"
  PREFIX="/linuxbench/bats/$TEST_ID"
  LOG_KEY="$FLEET/logs/$INSTANCE_ID-bootstrap.log"
  fleet_env "BUCKET=$TEST_BUCKET" "FLEET_ID=$FLEET" "CODE_SHA=$BOOT_SHA" "AWS_REGION=$TEST_REGION" \
    "SETTINGS=toyarena" "SECRET_NAMES=" "SECRET_PREFIX=$PREFIX"
  # A local instance: the launcher's venv (install-deps leaves it alone), shutdown stubbed.
  export LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1
  make_stub shutdown
}

@test "bootstrap: success runs every step in order, uploads the log, shuts down" {
  put_bundle "$PREFIX" 0 1 GH_TOKEN "$GH_VALUE"
  fleet_env "SECRET_NAMES=GH_TOKEN"
  FAKE_WORKER_TOKEN_OUT="$BATS_TEST_TMPDIR/worker-token" run "$WORKER_DIR/bootstrap.sh"
  [ "$status" -eq 0 ]
  local log step order=()
  log=$(cat "$LOG_FILE")
  assert_contains "$log" "bootstrap of fleet $FLEET on instance $INSTANCE_ID at code $BOOT_SHA"
  for step in "${STEPS[@]}"; do
    order+=("[$step] step $step: start" "[$step] step $step: ok in ")
  done
  assert_in_order "$log" "step bootstrap: start" "${order[@]}" "step bootstrap: ok in " "bootstrap finished"
  refute_contains "$log" "FAILED"
  # The real steps did their work.
  assert_contains "$log" "unpacked code $BOOT_SHA"
  assert_contains "$log" "setting toyarena: ready"
  assert_contains "$log" "FAKE-WORKER ran on $INSTANCE_ID for $FLEET"
  # Secrets reach the job loop's environment, never the log, and leave with the instance.
  assert_equal "$(cat "$BATS_TEST_TMPDIR/worker-token")" "$GH_VALUE"
  [ ! -e "$LB_HOME/etc/linuxbench/secrets.env" ]
  refute_contains "$log" "BATS-BOOT-SECRET"
  local uploaded
  uploaded=$(s3_get "$LOG_KEY")
  assert_in_order "$uploaded" "step fetch-code: start" "step run-worker: ok in " "bootstrap finished"
  refute_contains "$uploaded" "BATS-BOOT-SECRET"
  assert_equal "$(calls shutdown)" "-h now"
}

@test "bootstrap: a failing run-worker is logged as FAILED, uploaded, then shutdown" {
  preseed_code
  FAKE_WORKER_EXIT=3 run "$WORKER_DIR/bootstrap.sh"
  # It powers off and still exits with the failed step's status.
  [ "$status" -eq 3 ]
  local log uploaded
  log=$(cat "$LOG_FILE")
  assert_in_order "$log" "step settings-pull: ok in " "FAKE-WORKER ran" \
    "[run-worker] step run-worker: FAILED (exit 3)" "step bootstrap: FAILED (exit 3)" "bootstrap failed (exit 3)"
  uploaded=$(s3_get "$LOG_KEY")
  assert_in_order "$uploaded" "step run-worker: FAILED (exit 3)" "bootstrap failed (exit 3)"
  assert_equal "$(calls shutdown)" "-h now"
}

@test "bootstrap: a failing step stops the ones after it" {
  # worker-setup fails (its script is not in any extra-src tree): run-worker must not start,
  # or a fleet would run jobs on a half-prepared worker and report the boot a success.
  fleet_env WORKER_SETUP=no-such-setup.sh
  preseed_code
  run "$WORKER_DIR/bootstrap.sh"
  local log
  log=$(cat "$LOG_FILE")
  assert_in_order "$log" "step docker-login: ok in " "worker_setup script no-such-setup.sh not found" \
    "[worker-setup] step worker-setup: FAILED (exit 1)" "step bootstrap: FAILED (exit 1)" "bootstrap failed (exit 1)"
  refute_contains "$log" "step settings-pull: start"
  refute_contains "$log" "step run-worker: start"
  refute_contains "$log" "FAKE-WORKER"
  assert_contains "$(s3_get "$LOG_KEY")" "step worker-setup: FAILED (exit 1)"
  assert_equal "$(calls shutdown)" "-h now"
}
