#!/usr/bin/env bash
# Step: upload the bootstrap log to s3://$BUCKET/$FLEET_ID/logs/<instance-id>-bootstrap.log.
# Runs at the end of every bootstrap, also a failed one. Safe to rerun (overwrites).
#   sudo /opt/linuxbench/worker/upload-log.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

main() {
  ct_require BUCKET FLEET_ID
  local key
  key="$FLEET_ID/logs/$(ct_instance_id)-bootstrap.log"
  [[ -f $LB_LOG ]] || ct_die "no log at $LB_LOG"
  ct_aws s3 cp --only-show-errors --content-type text/plain "$LB_LOG" "s3://$BUCKET/$key"
  ct_log "log uploaded to s3://$BUCKET/$key"
}

main "$@"
