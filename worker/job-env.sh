#!/usr/bin/env bash
# The environment every job runs in: the secrets and the worker-setup environment, the
# code, the settings and the extra-src trees on PYTHONPATH, and where jobs find them.
# run-worker.sh sources this file and calls ct_job_env before the job loop; run, it runs
# one command in that environment, which is how `ct-fleet run-job` reruns a job on the
# controller's machine (with LB_HOME, LB_ROOT and LB_EXTRA pointing at its own copies):
#   worker/job-env.sh python -m ct_fleet.worker.runner JOB_JSON OUT.eval
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

ct_job_env() {
  local pypath="$LB_ROOT/lib:$LB_ROOT/examples/settings" tree
  set -a
  if [[ -f $LB_SECRETS_ENV ]]; then
    # shellcheck source=/dev/null
    source "$LB_SECRETS_ENV"
  fi
  if [[ -f $LB_SETUP_ENV ]]; then
    # shellcheck source=/dev/null
    source "$LB_SETUP_ENV"
  fi
  set +a
  if [[ -d $LB_SITE ]]; then
    pypath="$pypath:$LB_SITE"
  fi
  for tree in "$LB_EXTRA"/*/; do
    if [[ -d $tree ]]; then
      pypath="$pypath:${tree%/}"
    fi
  done
  # CT_EXTRA_ROOT: where jobs find a task shipped in an extra-src tree (ct_fleet.worker.inspect_job).
  export PYTHONPATH="$pypath" CODE_ROOT="$LB_ROOT" CT_EXTRA_ROOT="$LB_EXTRA"
  # Command jobs call the venv's tools (inspect, python) by name, as on the launching machine.
  export PATH="$LB_VENV/bin:$PATH"
}

main() {
  [[ $# -gt 0 ]] || ct_usage_error "give the command to run in a job's environment"
  ct_job_env
  exec "$@"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
