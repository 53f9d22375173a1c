#!/usr/bin/env bats
# worker/user-data.sh as the controller renders it (ct_fleet.fleet.render_user_data), run
# the way the local instance runner runs it: `bash user-data` with LB_HOME and INSTANCE_ID.

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
  python - "$USER_DATA" "$@" <<EOF
import sys
sys.path.insert(0, "$REPO_ROOT/lib")
from ct_fleet.services.instances import render_user_data
settings = dict(arg.split("=", 1) for arg in sys.argv[2:])
open(sys.argv[1], "w").write(render_user_data(settings))
EOF
}

render_fleet() {
  render "FLEET_ID=$FLEET" "BUCKET=$TEST_BUCKET" "CODE_SHA=$SHA" "AWS_REGION=$TEST_REGION" \
    "SETTINGS=toyarena other" "SECRET_NAMES=ANTHROPIC_API_KEY GH_TOKEN" "$@"
}

# A code artifact whose worker/bootstrap.sh only reports what it was started with.
upload_stub_code() {
  local code="$BATS_TEST_TMPDIR/code"
  mkdir -p "$code/worker"
  cat >"$code/worker/bootstrap.sh" <<'EOF'
#!/usr/bin/env bash
echo "BOOTSTRAP-MARKER fleet=$FLEET_ID sha=$CODE_SHA settings=$SETTINGS home=$LB_HOME"
EOF
  chmod +x "$code/worker/bootstrap.sh"
  upload_code "$SHA" "$code"
}

@test "user-data: renders to valid bash holding the settings, no placeholder left" {
  render_fleet "WORKER_SETUP=setup dir/it's.sh"
  run bash -n "$USER_DATA"
  [ "$status" -eq 0 ]
  refute_contains "$(cat "$USER_DATA")" "@FLEET_ENV@"
  assert_contains "$(cat "$USER_DATA")" "export FLEET_ID=$FLEET"
  # The fleet.env block sources back to the exact values (quotes and spaces survive).
  run bash -c 'eval "$(sed -n "/^cat >.*<<.FLEET_ENV.$/,/^FLEET_ENV$/p" "$1" | sed "1d;\$d")"; echo "$SETTINGS|$WORKER_SETUP"' x "$USER_DATA"
  assert_equal "$output" "toyarena other|setup dir/it's.sh"
}

@test "user-data: writes fleet.env, fetches and unpacks the code once, execs bootstrap" {
  upload_stub_code
  render_fleet
  run bash "$USER_DATA"
  [ "$status" -eq 0 ]
  assert_equal "$output" "BOOTSTRAP-MARKER fleet=$FLEET sha=$SHA settings=toyarena other home=$LB_HOME"
  # fleet.env is there for steps rerun by hand, and sources to the settings.
  run bash -c 'source "$1"; echo "$FLEET_ID|$BUCKET|$CODE_SHA|$SECRET_NAMES"' x "$FLEET_ENV"
  assert_equal "$output" "$FLEET|$TEST_BUCKET|$SHA|ANTHROPIC_API_KEY GH_TOKEN"
  assert_equal "$(cat "$LB_ROOT_DIR/.code-sha")" "$SHA"
  [ -x "$LB_ROOT_DIR/worker/bootstrap.sh" ]
  assert_not_called shutdown
  # A reboot with the code in place does not download it again.
  awsm s3 rm --only-show-errors "s3://$TEST_BUCKET/artifacts/$SHA.tar.gz"
  run bash "$USER_DATA"
  [ "$status" -eq 0 ]
  assert_contains "$output" "BOOTSTRAP-MARKER fleet=$FLEET"
}

@test "user-data: a missing artifact uploads a log saying fetch-code FAILED, then shuts down" {
  render_fleet
  run bash "$USER_DATA"
  [ "$status" -eq 1 ]
  refute_contains "$output" "BOOTSTRAP-MARKER"
  [ ! -e "$LB_ROOT_DIR/.code-sha" ]
  local uploaded
  uploaded=$(s3_get "$FLEET/logs/$INSTANCE_ID-bootstrap.log")
  assert_contains "$uploaded" "[user-data] step fetch-code: FAILED before bootstrap"
  # The log says why: the CLI's error is in it.
  assert_contains "$uploaded" "404"
  assert_equal "$(calls shutdown)" "-h now"
}
