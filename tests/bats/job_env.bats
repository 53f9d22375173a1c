#!/usr/bin/env bats
# worker/job-env.sh: the environment every job gets, on a worker (run-worker.sh) and in
# `ct-fleet run-job` (the command form).

load helpers

setup() {
  worker_setup
  mkdir -p "$LB_HOME/opt/linuxbench-extra/treeA" "$LB_HOME/opt/linuxbench-extra/treeB" "$LB_HOME/opt/linuxbench-site/site-packages"
}

@test "job-env.sh runs its command with the code, settings, site and extra-src trees on PYTHONPATH" {
  run "$REPO_ROOT/worker/job-env.sh" bash -c 'printf "%s\n" "$PYTHONPATH" "$CODE_ROOT" "$CT_EXTRA_ROOT" "${PATH%%:*}"'
  [ "$status" -eq 0 ]
  root="$LB_HOME/opt/linuxbench" extra="$LB_HOME/opt/linuxbench-extra"
  [ "${lines[0]}" = "$root/lib:$root/examples/settings:$LB_HOME/opt/linuxbench-site/site-packages:$extra/treeA:$extra/treeB" ]
  [ "${lines[1]}" = "$root" ]
  [ "${lines[2]}" = "$extra" ]
  [ "${lines[3]}" = "$root/.venv/bin" ]
}

@test "job-env.sh hands the job the secrets and the worker-setup environment, exported" {
  printf "export API_TOKEN='s3cr3t \$(x)'\n" >"$LB_HOME/etc/linuxbench/secrets.env"
  printf 'SETUP_VALUE=from-setup\n' >"$LB_HOME/opt/linuxbench-worker-setup.env"
  run "$REPO_ROOT/worker/job-env.sh" bash -c 'printf "%s|%s\n" "$API_TOKEN" "$SETUP_VALUE"'
  [ "$status" -eq 0 ]
  [ "$output" = 's3cr3t $(x)|from-setup' ]
}

@test "job-env.sh without a command is a usage error" {
  run "$REPO_ROOT/worker/job-env.sh"
  [ "$status" -eq 2 ]
  [[ $output == *"give the command"* ]]
}
