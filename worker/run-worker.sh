#!/usr/bin/env bash
# Step: run the Python job loop (ct_fleet.worker) until the queue stays empty. Jobs see
# the secrets, the worker-setup environment and the extra-src trees on PYTHONPATH.
# Safe to rerun by hand while the fleet has work:   sudo /opt/linuxbench/worker/run-worker.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

main() {
  ct_require FLEET_ID BUCKET
  set -a
  # shellcheck source=/dev/null
  [[ -f $LB_SECRETS_ENV ]] && source "$LB_SECRETS_ENV"
  # shellcheck source=/dev/null
  [[ -f $LB_SETUP_ENV ]] && source "$LB_SETUP_ENV"
  set +a
  local pypath="$LB_ROOT/lib:$LB_ROOT/examples/settings" tree
  for tree in "$LB_EXTRA"/*/; do
    [[ -d $tree ]] && pypath="$pypath:${tree%/}"
  done
  export PYTHONPATH="$pypath" CODE_ROOT="$LB_ROOT" WORK_DIR="${WORK_DIR:-$LB_HOME/var/lib/linuxbench/jobs}"
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
