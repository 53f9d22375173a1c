#!/usr/bin/env bash
# Step: unpack the --extra-src trees into $LB_EXTRA, prepare WORKER_USER (docker group,
# owner of $LB_ROOT and of its Docker config $LB_WORKER_DOCKER_CONFIG) and run the
# WORKER_SETUP script as root. The script may write environment for jobs to
# /opt/linuxbench-worker-setup.env, which run-worker.sh sources.
# Safe to rerun: trees are re-extracted over themselves.
#   sudo /opt/linuxbench/worker/worker-setup.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

unpack_extra_src() {
  local key
  mkdir -p "$LB_EXTRA"
  for key in ${EXTRA_SRC_KEYS:-}; do
    ct_unpack_artifact "$key" "$LB_EXTRA"
    ct_log "unpacked $key"
  done
}

prepare_user() {
  local user=$1
  id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
  getent group docker >/dev/null && usermod -aG docker "$user"
  chown -R "$user" "$LB_ROOT"
  # Its registry login (docker-login.sh ran before the user may have existed).
  ct_own_worker_docker_config "$user"
  ct_log "worker user $user ready"
}

main() {
  unpack_extra_src
  if [[ -n ${WORKER_USER:-} ]]; then
    prepare_user "$WORKER_USER"
  fi
  if [[ -n ${WORKER_SETUP:-} ]]; then
    local script="$LB_EXTRA/$WORKER_SETUP"
    [[ -f $script ]] || ct_die "worker_setup script $WORKER_SETUP not found in the extra-src trees"
    ct_log "running worker setup $WORKER_SETUP"
    (cd "$(dirname "$script")" && LINUXBENCH_WORKER_USER="${WORKER_USER:-}" bash "$script")
  fi
}

main "$@"
