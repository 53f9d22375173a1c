#!/usr/bin/env bash
# Worker bootstrap: run every step in order, logging each with its timing, then upload
# the log and shut down, on success and on failure alike. user-data starts it after the
# code is unpacked. To rerun one step by hand on a worker: sudo /opt/linuxbench/worker/<step>.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

# worker-setup unpacks the extra-src trees, which settings-pull may import settings from.
STEPS=(fetch-code install-deps fetch-secrets docker-login worker-setup settings-pull run-worker)

finish() {
  local rc=$?
  trap - EXIT
  if [[ $rc -ne 0 ]]; then
    lb_log "bootstrap failed (exit $rc)"
  else
    lb_log "bootstrap finished"
  fi
  LB_STEP=upload-log "$here/upload-log.sh" || true
  LB_STEP=shutdown exec "$here/shutdown-instance.sh"
}

run_steps() {
  local step
  for step in "${STEPS[@]}"; do
    # Explicit: run_steps runs under lb_timed's `||`, where set -e does not apply.
    LB_STEP=$step lb_timed "$step" "$here/$step.sh" || return
  done
}

main() {
  mkdir -p "$(dirname "$LB_LOG")"
  exec > >(tee -a "$LB_LOG") 2>&1
  trap finish EXIT
  lb_log "bootstrap of fleet ${FLEET_ID:-?} on instance $(lb_instance_id) at code ${CODE_SHA:-?}"
  lb_timed bootstrap run_steps
}

main "$@"
