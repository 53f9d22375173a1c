#!/usr/bin/env bash
# Step: fetch the code at the pinned SHA (s3://$BUCKET/artifacts/$CODE_SHA.tar.gz) into $LB_ROOT.
# Bootstrap's first step and the only fetch of the code (user-data carries just the boot
# kit that runs it). Safe to rerun: it skips the download when $LB_ROOT already holds that SHA.
# A local instance (LB_CODE_CACHE set) unpacks this machine's copy (lib.sh, ct_unpack_artifact).
#   sudo /opt/linuxbench/worker/fetch-code.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

main() {
  ct_require BUCKET CODE_SHA
  local stamp="$LB_ROOT/.code-sha"
  if [[ -f $stamp && $(cat "$stamp") == "$CODE_SHA" ]]; then
    ct_log "code $CODE_SHA already in $LB_ROOT"
    return 0
  fi
  ct_unpack_artifact "artifacts/$CODE_SHA.tar.gz" "$LB_ROOT"
  echo "$CODE_SHA" >"$stamp"
  ct_log "unpacked code $CODE_SHA into $LB_ROOT"
}

main "$@"
