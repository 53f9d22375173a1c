#!/usr/bin/env bash
# Step: log Docker in to the private registry DOCKER_REGISTRY (empty: Docker Hub) with
# DOCKER_ORG_NAME / DOCKER_ORG_PAT from the secrets file (or from SSM
# $DOCKER_ORG_NAME_SSM_PARAM / $DOCKER_ORG_PAT_SSM_PARAM): for root (DOCKER_CONFIG, else
# ~/.docker) and, when WORKER_USER is set, for that user too, in its own client config
# $LB_WORKER_DOCKER_CONFIG (owned by the user, 0700), which run-worker.sh exports as
# DOCKER_CONFIG to the jobs. The PAT reaches docker on stdin only; the log names the
# registry and the user name, nothing else. Skipped when no credentials are configured.
# Safe to rerun.
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

registry_name() {
  echo "${DOCKER_REGISTRY:-Docker Hub}"
}

# login_into CONFIG_DIR: docker login, writing to CONFIG_DIR ("" = the caller's default).
# docker's output (a warning naming the config file, "Login Succeeded") stays out of the
# log; on failure its last error line is logged, with the PAT masked should it appear.
login_into() {
  local dir=$1 err
  local -a prefix=()
  [[ -n $dir ]] && prefix=(env DOCKER_CONFIG="$dir")
  if ! err=$("${prefix[@]}" docker login ${DOCKER_REGISTRY:+"$DOCKER_REGISTRY"} --username "$DOCKER_ORG_NAME" \
    --password-stdin <<<"$DOCKER_ORG_PAT" 2>&1 >/dev/null); then
    err=$(printf '%s\n' "${err//"$DOCKER_ORG_PAT"/<PAT>}" | grep -v '^WARNING' | grep . | tail -n1)
    ct_die "docker login to $(registry_name) as $DOCKER_ORG_NAME FAILED: ${err:-no error text}"
  fi
}

login_worker_user() {
  local user=$1
  install -d -m 0700 "$LB_WORKER_DOCKER_CONFIG"
  login_into "$LB_WORKER_DOCKER_CONFIG"
  # A user that worker-setup.sh has yet to create gets the directory there.
  if id "$user" >/dev/null 2>&1; then
    ct_own_worker_docker_config "$user"
  fi
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
  login_into ""
  if [[ -n ${WORKER_USER:-} ]]; then
    login_worker_user "$WORKER_USER"
    ct_log "docker logged in to $(registry_name) as $DOCKER_ORG_NAME (root and worker user $WORKER_USER)"
  else
    ct_log "docker logged in to $(registry_name) as $DOCKER_ORG_NAME"
  fi
}

main "$@"
