#!/usr/bin/env bash
# Step: fetch the code at the pinned SHA (s3://$BUCKET/artifacts/$CODE_SHA.tar.gz) into $LB_ROOT.
# Bootstrap's first step and the only fetch of the code (user-data carries just the boot
# kit that runs it). Safe to rerun: it skips the download when $LB_ROOT already holds that SHA.
# A local instance (LB_CODE_CACHE set) takes the artifact from this machine's cache, where
# the first instance to need a SHA downloads it: the SHA names the content, so the copy
# is the artifact, and the AWS CLI's half second of CPU is paid once, not per instance.
#   sudo /opt/linuxbench/worker/fetch-code.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

download() {
  ct_aws s3 cp --only-show-errors "s3://$BUCKET/artifacts/$CODE_SHA.tar.gz" "$1"
}

# from_cache DEST: hard-link the cached artifact to DEST (1 if there is none). A link, not
# the cached name: another instance may prune that name while this one unpacks.
from_cache() {
  local cached="$LB_CODE_CACHE/$CODE_SHA.tar.gz"
  ln -f "$cached" "$1" 2>/dev/null || return 1
  touch "$cached" 2>/dev/null || true # most recently used: pruned last
  ct_log "artifact $CODE_SHA from this machine's cache ($LB_CODE_CACHE)"
}

# into_cache FILE: add a downloaded artifact to the cache, whole or not at all, and drop
# the artifacts no instance has used for a day (each edit of a dirty tree is a new SHA).
into_cache() {
  local cached="$LB_CODE_CACHE/$CODE_SHA.tar.gz" part
  part="$cached.$$"
  if ln -f "$1" "$part"; then
    mv -f "$part" "$cached"
  fi
  find "$LB_CODE_CACHE" -maxdepth 1 -type f -mmin +1440 -delete 2>/dev/null || true # and what killed fetches left
}

unpack() {
  mkdir -p "$LB_ROOT"
  tar -xzf "$1" -C "$LB_ROOT"
}

main() {
  ct_require BUCKET CODE_SHA
  local stamp="$LB_ROOT/.code-sha" tmp cache=${LB_CODE_CACHE:-}
  if [[ -f $stamp && $(cat "$stamp") == "$CODE_SHA" ]]; then
    ct_log "code $CODE_SHA already in $LB_ROOT"
    return 0
  fi
  if [[ -z $cache ]]; then
    tmp=$(mktemp)
    download "$tmp"
    unpack "$tmp"
  else
    mkdir -p "$cache"
    tmp=$(mktemp -p "$cache" ".fetch.XXXXXX") # beside the cache: a hard link cannot cross file systems
    if from_cache "$tmp" && unpack "$tmp"; then
      :
    else
      # None cached, or a cached copy that does not unpack: it goes, and S3's is fetched.
      rm -f "$cache/$CODE_SHA.tar.gz"
      download "$tmp" || { rm -f "$tmp"; return 1; }
      unpack "$tmp" || { rm -f "$tmp"; return 1; }
      into_cache "$tmp"
    fi
  fi
  rm -f "$tmp"
  echo "$CODE_SHA" >"$stamp"
  ct_log "unpacked code $CODE_SHA into $LB_ROOT"
}

main "$@"
