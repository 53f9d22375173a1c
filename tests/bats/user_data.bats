#!/usr/bin/env bats
# worker/user-data.sh as the controller renders it (ct_fleet.protocol.user_data), run the
# way the local instance runner runs it: `bash user-data` with LB_HOME and INSTANCE_ID. It
# writes fleet.env, installs the AWS CLI when there is none, and hands over to the boot
# kit's bootstrap, whose fetch-code step is the one fetch of the code.
# (tests/ec2/test_user_data.py tries hostile values in every setting.)

load helpers

setup_file() {
  start_moto
  make_bucket
}
teardown_file() { stop_moto; }

setup() {
  worker_setup
  rm -f "$FLEET_ENV"
  FLEET="fleet-$TEST_ID"
  SHA=$(fake_sha)
  USER_DATA="$BATS_TEST_TMPDIR/user-data"
  make_stub shutdown
}

# render KEY=VALUE...: the user-data for these settings, as the controller launches it.
render() {
  python - "$REPO_ROOT/lib" "$USER_DATA" "$@" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from ct_fleet.protocol import FleetEnv
from ct_fleet.protocol.user_data import render_user_data
settings = dict(arg.split("=", 1) for arg in sys.argv[3:])
open(sys.argv[2], "w").write(render_user_data(FleetEnv.from_env(settings)))
PY
}

render_fleet() {
  render "FLEET_ID=$FLEET" "BUCKET=$TEST_BUCKET" "CODE_SHA=$SHA" "AWS_REGION=$TEST_REGION" \
    "SETTINGS=toyarena other" "SECRET_NAMES=ANTHROPIC_API_KEY GH_TOKEN" "$@"
}

# A code artifact whose steps after fetch-code only say they ran (run-worker: with what).
upload_stub_code() {
  local code="$BATS_TEST_TMPDIR/code" step
  mkdir -p "$code/worker"
  for step in install-deps fetch-secrets docker-login settings-pull worker-setup; do
    printf '#!/usr/bin/env bash\necho "STEP-MARKER %s"\n' "$step" >"$code/worker/$step.sh"
  done
  cat >"$code/worker/run-worker.sh" <<'SH'
#!/usr/bin/env bash
source "$(dirname "$0")/lib.sh"
echo "WORKER-MARKER fleet=$FLEET_ID sha=$CODE_SHA settings=$SETTINGS home=$LB_HOME"
SH
  chmod +x "$code"/worker/*.sh
  upload_code "$SHA" "$code"
}

@test "user-data: valid bash under EC2's 16 KB, settings only as base64, no placeholder left" {
  render_fleet "WORKER_SETUP=setup dir/it's.sh"
  run bash -n "$USER_DATA"
  [ "$status" -eq 0 ]
  [ "$(wc -c <"$USER_DATA")" -le 16384 ]
  refute_contains "$(cat "$USER_DATA")" "@FLEET_ENV@"
  refute_contains "$(cat "$USER_DATA")" "@BOOT_KIT@"
  refute_contains "$(cat "$USER_DATA")" "$FLEET"
  grep -qE "^FLEET_ENV='[A-Za-z0-9+/=]+'$" "$USER_DATA"
  grep -qE "^BOOT_KIT='[A-Za-z0-9+/=]+'$" "$USER_DATA"
  # FLEET_ENV decodes to fleet.env, which sources back to the exact values.
  sed -n "s/^FLEET_ENV='\(.*\)'$/\1/p" "$USER_DATA" | base64 -d >"$BATS_TEST_TMPDIR/fleet.env"
  run bash -c 'source "$1"; echo "$FLEET_ID|$SETTINGS|$WORKER_SETUP"' x "$BATS_TEST_TMPDIR/fleet.env"
  assert_equal "$output" "$FLEET|toyarena other|setup dir/it's.sh"
}

@test "user-data: writes fleet.env, hands over to bootstrap, whose fetch-code fetches the code once" {
  upload_stub_code
  render_fleet
  run bash "$USER_DATA"
  [ "$status" -eq 0 ]
  local log
  log=$(cat "$LOG_FILE")
  assert_in_order "$log" "step fetch-code: start" "unpacked code $SHA" "step fetch-code: ok in" \
    "STEP-MARKER install-deps" "STEP-MARKER worker-setup" \
    "WORKER-MARKER fleet=$FLEET sha=$SHA settings=toyarena other home=$LB_HOME" "bootstrap finished"
  assert_equal "$(grep -c "unpacked code" <<<"$log")" 1
  # The AWS CLI is there: nothing to install.
  refute_contains "$log" "install-aws-cli"
  # fleet.env is there for steps rerun by hand, and sources to the settings.
  run bash -c 'source "$1"; echo "$FLEET_ID|$BUCKET|$CODE_SHA|$SECRET_NAMES"' x "$FLEET_ENV"
  assert_equal "$output" "$FLEET|$TEST_BUCKET|$SHA|ANTHROPIC_API_KEY GH_TOKEN"
  assert_equal "$(cat "$LB_ROOT_DIR/.code-sha")" "$SHA"
  assert_contains "$(s3_get "$FLEET/logs/$INSTANCE_ID-bootstrap.log")" "bootstrap finished"
  assert_equal "$(calls shutdown)" "-h now"
}

@test "user-data: a second boot with the code in place does not download it again" {
  upload_stub_code
  render_fleet
  run bash "$USER_DATA"
  [ "$status" -eq 0 ]
  awsm s3 rm --only-show-errors "s3://$TEST_BUCKET/artifacts/$SHA.tar.gz"
  run bash "$USER_DATA"
  [ "$status" -eq 0 ]
  assert_contains "$(cat "$LOG_FILE")" "code $SHA already in $LB_ROOT_DIR"
  assert_equal "$(grep -c "WORKER-MARKER fleet=$FLEET" "$LOG_FILE")" 2
}

@test "user-data: a missing artifact uploads a log saying fetch-code FAILED, then shuts down" {
  render_fleet
  run bash "$USER_DATA"
  [ "$status" -eq 1 ]
  [ ! -e "$LB_ROOT_DIR/.code-sha" ]
  local uploaded
  uploaded=$(s3_get "$FLEET/logs/$INSTANCE_ID-bootstrap.log")
  assert_in_order "$uploaded" "[fetch-code] step fetch-code: FAILED (exit 1)" "step bootstrap: FAILED (exit 1)" \
    "bootstrap failed (exit 1)"
  # The log says why: the CLI's error is in it, and the controller's parser finds both.
  assert_contains "$uploaded" "404"
  run python -c '
import sys
sys.path.insert(0, sys.argv[1])
from ct_fleet.protocol import steplog
print(steplog.first_failure(sys.stdin.read()).describe())' "$REPO_ROOT/lib" <<<"$uploaded"
  assert_contains "$output" "step fetch-code FAILED (exit 1)"
  assert_contains "$output" "404"
  assert_equal "$(calls shutdown)" "-h now"
}

@test "user-data: no AWS CLI on the image installs it first; a failed install is logged, then shutdown" {
  render_fleet
  # AWS's download host unreachable, every time (ct_retry's pauses not waited for).
  make_stub curl 'exit 6'
  make_stub sleep
  make_stub apt-get 'exit 100' # never the real one, should this system lack curl or unzip
  # The base system and the stubs only: no aws anywhere on PATH.
  PATH="$STUB_BIN:/usr/bin:/bin" run bash "$USER_DATA"
  [ "$status" -eq 1 ]
  local log
  log=$(cat "$LOG_FILE")
  assert_in_order "$log" "[user-data] step install-aws-cli: start" "[user-data] attempt 2/3 failed" \
    "[user-data] giving up after 3 attempts: curl" "[user-data] step install-aws-cli: FAILED (exit 1)" \
    "user-data failed (exit 1)" "shutting down"
  assert_equal "$(calls curl | wc -l)" 3
  refute_contains "$log" "step fetch-code"
  assert_equal "$(calls shutdown)" "-h now"
}
