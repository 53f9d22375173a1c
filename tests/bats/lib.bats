#!/usr/bin/env bats
# worker/lib.sh, the worker's area file of lib/bash/ct.sh: paths under LB_HOME, fleet.env,
# the instance's inputs, ct_instance_id, ct_require's hint.

load helpers

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

@test "lib.sh: LB_VENV is an input; CT_FLEET_VENV (the controller's own) is not read" {
  LB_VENV=/some/venv run lib 'echo "$LB_VENV"'
  [ "$status" -eq 0 ]
  assert_equal "$output" /some/venv
  CT_FLEET_VENV=/controller/venv run lib 'echo "$LB_VENV"'
  assert_equal "$output" "$LB_HOME/opt/linuxbench/.venv"
}

@test "lib.sh: brings the ct_* library and LB_SCRIPTS, the worker scripts' directory" {
  run lib 'declare -F ct_step ct_log ct_aws ct_instance_id ct_finish_boot >/dev/null && echo "$LB_SCRIPTS"'
  [ "$status" -eq 0 ]
  assert_equal "$output" "$WORKER_DIR"
}

@test "ct_instance_id: uses INSTANCE_ID when the launcher set it (no IMDS)" {
  INSTANCE_ID=i-0123456789abcdef0 run lib 'ct_instance_id'
  [ "$status" -eq 0 ]
  assert_equal "$output" i-0123456789abcdef0
}

@test "ct_require: names the missing setting and the fleet.env path, exit 1" {
  fleet_env BUCKET=b
  run lib 'ct_require BUCKET FLEET_ID; echo reached'
  [ "$status" -eq 1 ]
  assert_contains "$output" "ERROR: FLEET_ID is not set (is $FLEET_ENV present?)"
  refute_contains "$output" reached
  fleet_env FLEET_ID=f
  run lib 'ct_require BUCKET FLEET_ID; echo reached'
  [ "$status" -eq 0 ]
  assert_equal "$output" reached
}

@test "the local instance runner sets exactly the inputs lib.sh documents" {
  local documented given
  documented=$(sed -n '/^# The instance.s inputs/,/^# The AWS CLI/p' "$WORKER_DIR/lib.sh" |
    grep -oE '^#   [A-Z_]+' | awk '{print $2}' | sort)
  given=$(python - "$REPO_ROOT" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, f"{sys.argv[1]}/lib")
from ct_fleet.cloud.local_instances import instance_env
print("\n".join(sorted(instance_env(Path("/h"), "i-1", {"CT_FLEET_CACHE_DIR": "/c"}))))
PY
)
  assert_equal "$given" "$documented"
}
