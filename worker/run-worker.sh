#!/usr/bin/env bash
# Step: run the Python job loop (ct_fleet.worker) until the queue stays empty, in the
# environment every job gets (job-env.sh: secrets, worker-setup env, extra-src trees).
# Safe to rerun by hand while the fleet has work:   sudo /opt/linuxbench/worker/run-worker.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"
# shellcheck source=worker/job-env.sh
source "$here/job-env.sh"

main() {
  ct_require FLEET_ID BUCKET
  ct_job_env
  export WORK_DIR="${WORK_DIR:-$LB_HOME/var/lib/linuxbench/jobs}"
  INSTANCE_ID=$(ct_instance_id)
  export INSTANCE_ID
  # Marks this process's AWS calls as the worker's in a CT_FLEET_API_LOG (the IAM proof).
  export CT_FLEET_ROLE=worker
  cd "$LB_ROOT"
  if [[ -n ${WORKER_USER:-} && $(id -un) != "$WORKER_USER" ]]; then
    mkdir -p "$WORK_DIR" && chown "$WORKER_USER" "$WORK_DIR"
    # Its own registry login (docker-login.sh); sudo keeps HOME, so ~/.docker would be root's.
    export DOCKER_CONFIG="$LB_WORKER_DOCKER_CONFIG"
    exec sudo --preserve-env -u "$WORKER_USER" "$LB_VENV/bin/python" -m ct_fleet.worker
  fi
  exec "$LB_VENV/bin/python" -m ct_fleet.worker
}

main "$@"
