#!/usr/bin/env bash
# Worker bootstrap: run every step in order, logging each with its timing, then upload
# the log and shut down, on success and on failure alike. user-data starts it from the
# boot kit it carries (this script, fetch-code, upload-log, shutdown-instance and their
# libraries); the first step, fetch-code, is the only fetch of the code.
# To rerun one step by hand on a worker: sudo /opt/linuxbench/worker/<step>.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

STEPS=(fetch-code install-deps fetch-secrets docker-login settings-pull worker-setup run-worker)

finish() {
  if ((CT_EXIT_STATUS != 0)); then
    ct_log "bootstrap failed (exit $CT_EXIT_STATUS)"
  else
    ct_log "bootstrap finished"
  fi
  ct_finish_boot
}

run_steps() {
  local step
  for step in "${STEPS[@]}"; do
    # "$here": the steps fetch-code just unpacked (the boot kit's copies are replaced).
    CT_TAG=$step ct_step "$step" "$here/$step.sh"
  done
}

main() {
  ct_tee_log "$LB_LOG"
  ct_at_exit finish
  ct_log "bootstrap of fleet ${FLEET_ID:-?} on instance $(ct_instance_id) at code ${CODE_SHA:-?}"
  ct_step bootstrap run_steps
}

main "$@"
