#!/usr/bin/env bash
# Step: fetch the code at the pinned SHA (s3://$BUCKET/artifacts/$CODE_SHA.tar.gz) into $LB_ROOT.
# Bootstrap's first step and the only fetch of the code (user-data carries just the boot
# kit that runs it). Safe to rerun: it skips the download when $LB_ROOT already holds that SHA.
# A local instance (LB_CODE_CACHE set) unpacks this machine's copy, downloaded by the first
# instance to need that SHA (it names the content): one AWS CLI call per machine, not each.
#   sudo /opt/linuxbench/worker/fetch-code.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

main() {
  ct_require BUCKET CODE_SHA
  local stamp="$LB_ROOT/.code-sha" tmp cache=${LB_CODE_CACHE:-}
  if [[ -f $stamp && $(cat "$stamp") == "$CODE_SHA" ]]; then
    ct_log "code $CODE_SHA already in $LB_ROOT"
    return 0
  fi
  mkdir -p "$LB_ROOT" ${cache:+"$cache"}
  tmp=$(mktemp ${cache:+-p "$cache"}) # beside the cache: a hard link stays on its file system
  # A link to the cached copy, not its name, which another instance may replace meanwhile.
  if [[ -n $cache ]] && ln -f "$cache/$CODE_SHA.tar.gz" "$tmp" 2>/dev/null && tar -xzf "$tmp" -C "$LB_ROOT"; then
    touch "$tmp" # most recently used: the last to be dropped
    ct_log "artifact $CODE_SHA from this machine's cache ($cache)"
  else
    ct_aws s3 cp --only-show-errors "s3://$BUCKET/artifacts/$CODE_SHA.tar.gz" "$tmp"
    tar -xzf "$tmp" -C "$LB_ROOT"
    if [[ -n $cache ]]; then # cached whole, replacing a copy that did not unpack
      ln -f "$tmp" "$cache/$CODE_SHA.tar.gz"
      find "$cache" -maxdepth 1 -type f -mmin +1440 -delete 2>/dev/null || true # unused for a day
    fi
  fi
  rm -f "$tmp"
  echo "$CODE_SHA" >"$stamp"
  ct_log "unpacked code $CODE_SHA into $LB_ROOT"
}

main "$@"
