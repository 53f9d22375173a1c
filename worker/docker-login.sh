#!/usr/bin/env bash
# Step: log Docker in to the private registry with DOCKER_ORG_NAME / DOCKER_ORG_PAT from the
# secrets file (or from SSM $DOCKER_ORG_NAME_SSM_PARAM / $DOCKER_ORG_PAT_SSM_PARAM).
# Skipped when no credentials are configured. Safe to rerun.
#   sudo /opt/linuxbench/worker/docker-login.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

from_ssm() {
  local name_param=$1 pat_param=$2
  DOCKER_ORG_NAME=$(ct_aws ssm get-parameter --name "$name_param" --query Parameter.Value --output text 2>/dev/null) || return 1
  DOCKER_ORG_PAT=$(ct_aws ssm get-parameter --with-decryption --name "$pat_param" --query Parameter.Value --output text 2>/dev/null) || return 1
}

main() {
  if [[ -f $LB_SECRETS_ENV ]]; then
    # shellcheck source=/dev/null
    source "$LB_SECRETS_ENV"
  fi
  if [[ -z ${DOCKER_ORG_NAME:-} || -z ${DOCKER_ORG_PAT:-} ]] && [[ -n ${DOCKER_ORG_NAME_SSM_PARAM:-} ]]; then
    from_ssm "$DOCKER_ORG_NAME_SSM_PARAM" "${DOCKER_ORG_PAT_SSM_PARAM:-}" || true
  fi
  if [[ -z ${DOCKER_ORG_NAME:-} || -z ${DOCKER_ORG_PAT:-} ]]; then
    ct_log "no Docker registry credentials: skipping docker login"
    return 0
  fi
  command -v docker >/dev/null 2>&1 || ct_die "docker is not installed"
  docker login --username "$DOCKER_ORG_NAME" --password-stdin <<<"$DOCKER_ORG_PAT" >/dev/null
  ct_log "docker logged in as $DOCKER_ORG_NAME"
}

main "$@"
