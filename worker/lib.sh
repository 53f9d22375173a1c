#!/usr/bin/env bash
# Shared by every worker step: paths, fleet settings, logging with timing, the AWS CLI.
# Sourced, never run. Every absolute path is under LB_HOME, which is "" on EC2 and the
# instance's own directory on the embedded cloud, so the same scripts serve both.
# shellcheck disable=SC2034  # variables here are used by the scripts that source this file

LB_HOME="${LB_HOME:-}"
LB_ROOT="${LB_ROOT:-$LB_HOME/opt/linuxbench}"
LB_ETC="${LB_ETC:-$LB_HOME/etc/linuxbench}"
LB_LOG="${LB_LOG:-$LB_HOME/var/log/linuxbench-bootstrap.log}"
LB_EXTRA="${LB_EXTRA:-$LB_HOME/opt/linuxbench-extra}"
LB_SITE="${LB_SITE:-$LB_HOME/opt/linuxbench-site}" # settings' requirements, when the venv is shared
LB_SETUP_ENV="${LB_SETUP_ENV:-$LB_HOME/opt/linuxbench-worker-setup.env}"
LB_FLEET_ENV="$LB_ETC/fleet.env"
LB_SECRETS_ENV="$LB_ETC/secrets.env"

# The fleet's settings, written by user-data; present when a step is rerun by hand.
if [[ -f $LB_FLEET_ENV ]]; then
  # shellcheck source=/dev/null
  source "$LB_FLEET_ENV"
fi
LB_VENV="${CT_FLEET_VENV:-${LB_VENV:-$LB_ROOT/.venv}}"

lb_log() {
  printf '%s [%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${LB_STEP:-${0##*/}}" "$*" >&2
}

lb_die() {
  lb_log "ERROR: $*"
  exit 1
}

# Run a function as a named, timed step: "start", then "ok in Ns" or "FAILED (exit N) after Ns".
lb_timed() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  lb_log "step $name: start"
  "$@" || rc=$?
  if [[ $rc -eq 0 ]]; then
    lb_log "step $name: ok in $(($(date +%s) - start))s"
  else
    lb_log "step $name: FAILED (exit $rc) after $(($(date +%s) - start))s"
  fi
  return "$rc"
}

# The AWS CLI, pointed at the configured endpoint. CLI v1 ignores AWS_ENDPOINT_URL, so
# pass it explicitly; v2 accepts the flag as well.
lb_aws() {
  local args=()
  [[ -n ${AWS_ENDPOINT_URL:-} ]] && args+=(--endpoint-url "$AWS_ENDPOINT_URL")
  [[ -n ${AWS_REGION:-} ]] && args+=(--region "$AWS_REGION")
  aws "${args[@]}" "$@"
}

# This instance's id: INSTANCE_ID when the launcher set it (embedded cloud), else IMDSv2.
lb_instance_id() {
  if [[ -n ${INSTANCE_ID:-} ]]; then
    echo "$INSTANCE_ID"
    return
  fi
  local token
  token=$(curl -sf -X PUT http://169.254.169.254/latest/api/token \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
  curl -sf -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/instance-id
}

lb_require() {
  local name
  for name in "$@"; do
    [[ -n ${!name:-} ]] || lb_die "$name is not set (is $LB_FLEET_ENV present?)"
  done
}
