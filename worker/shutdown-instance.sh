#!/usr/bin/env bash
# Step: power off. Instances launch with shutdown behaviour "terminate", so this ends the
# instance (and its bill). LB_SHUTDOWN, when set, is the program to run instead (the
# embedded cloud's shim, which terminates the instance through the EC2 API; see lib.sh).
# The secrets file goes first: on EC2 the disk dies with the instance, but a local
# instance's directory stays behind. Set LB_NO_SHUTDOWN=1 when rerunning steps by hand to
# stay logged in (and keep the secrets).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

main() {
  if [[ ${LB_NO_SHUTDOWN:-0} == 1 ]]; then
    ct_log "LB_NO_SHUTDOWN=1: staying up"
    return 0
  fi
  rm -f "$LB_SECRETS_ENV"
  ct_log "shutting down"
  if [[ -n ${LB_SHUTDOWN:-} ]]; then
    "$LB_SHUTDOWN" -h now
  elif [[ $(id -u) -eq 0 ]]; then
    shutdown -h now
  else
    sudo shutdown -h now
  fi
}

main "$@"
