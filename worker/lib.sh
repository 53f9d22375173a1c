#!/usr/bin/env bash
# The worker's area file of lib/bash/ct.sh: the worker's paths and the fleet's settings.
# Sourced by every worker step (and by user-data), never run.
#
# The instance's inputs: what a worker is told beyond fleet.env. On EC2 none is set and
# each default holds; the embedded cloud's local instance runner sets all of them for each
# local instance (lib/ct_fleet/cloud/local_instances.py, instance_env):
#   LB_HOME              root of every path below: "" on EC2, the instance's own directory
#   INSTANCE_ID          this instance's id (default: asked from the instance metadata service)
#   LB_VENV              the job loop's virtualenv (default $LB_ROOT/.venv)
#   LB_VENV_PROVIDED     1: LB_VENV is ready as it is (a local instance shares the
#                        controller's venv), install-deps.sh leaves it alone
#   LB_CODE_CACHE        this machine's shared artifacts: the code, --extra-src trees (ct_unpack_artifact)
#   LB_SITE_CACHE        this machine's shared installs of requirements (settings-pull.sh)
#   LB_SHUTDOWN          the program that powers this instance off (default: shutdown,
#                        through sudo when not root); locally a shim terminating it via EC2
#   CT_IMDS_ENDPOINT     the instance metadata service the job loop polls for the spot
#                        interruption notice and the rebalance recommendation (default:
#                        169.254.169.254 on spot instances); locally the runner's loopback one
# The AWS CLI and boto3 read AWS_ENDPOINT_URL (moto locally) and AWS_REGION from the same
# environment. For a step rerun by hand: LB_NO_SHUTDOWN=1 (stay up), SECRETS_WAIT, WORK_DIR.
# shellcheck disable=SC2034  # variables here are used by the scripts that source this file

# The worker's scripts: this file's directory (in a checkout, or $LB_ROOT/worker).
LB_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/bash/ct.sh
source "$LB_SCRIPTS/../lib/bash/ct.sh"

LB_HOME="${LB_HOME:-}"
LB_ROOT="${LB_ROOT:-$LB_HOME/opt/linuxbench}"
LB_ETC="${LB_ETC:-$LB_HOME/etc/linuxbench}"
LB_LOG="${LB_LOG:-$LB_HOME/var/log/linuxbench-bootstrap.log}"
LB_EXTRA="${LB_EXTRA:-$LB_HOME/opt/linuxbench-extra}"
LB_SITE="${LB_SITE:-$LB_HOME/opt/linuxbench-site/site-packages}" # see settings-pull.sh
LB_SETUP_ENV="${LB_SETUP_ENV:-$LB_HOME/opt/linuxbench-worker-setup.env}"
LB_VENV="${LB_VENV:-$LB_ROOT/.venv}"
LB_FLEET_ENV="$LB_ETC/fleet.env"
LB_SECRETS_ENV="$LB_ETC/secrets.env"
CT_REQUIRE_HINT="is $LB_FLEET_ENV present?"
# WORKER_USER's Docker client config (its registry login): docker-login.sh writes it,
# worker-setup.sh hands it to the user, run-worker.sh exports it as DOCKER_CONFIG.
LB_WORKER_DOCKER_CONFIG="${LB_WORKER_DOCKER_CONFIG:-$LB_HOME/var/lib/linuxbench/worker-docker}"

# The fleet's settings (ct_fleet.protocol.fleet_env), written by user-data; present when a
# step is rerun by hand. Its values are single-quoted by the controller: sourcing sets them
# as they are, whatever they hold.
if [[ -f $LB_FLEET_ENV ]]; then
  # shellcheck source=/dev/null
  source "$LB_FLEET_ENV"
fi

# The AWS CLI (v1 here, v2 on EC2) retries throttling and 5xx as the Python clients do
# (ct_fleet.services.session.client_config): with backoff, jitter and client-side rate
# limiting, up to 8 attempts. A value set in the environment wins.
export AWS_RETRY_MODE="${AWS_RETRY_MODE:-adaptive}"
export AWS_MAX_ATTEMPTS="${AWS_MAX_ATTEMPTS:-8}"

# This instance's id: INSTANCE_ID when given, else from IMDSv2.
ct_instance_id() {
  if [[ -n ${INSTANCE_ID:-} ]]; then
    echo "$INSTANCE_ID"
    return
  fi
  local token
  token=$(curl -sf -X PUT http://169.254.169.254/latest/api/token \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
  curl -sf -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/instance-id
}

# The end of every boot, a failed one too: the log to S3 (best effort), then power off.
# Not exec'd: the script still exits with its own status.
ct_finish_boot() {
  CT_TAG=upload-log "$LB_SCRIPTS/upload-log.sh" || true
  CT_TAG=shutdown "$LB_SCRIPTS/shutdown-instance.sh"
}

# ct_own_worker_docker_config USER: the worker's docker config dir, USER's own and private.
ct_own_worker_docker_config() {
  local user=$1
  install -d -m 0700 "$LB_WORKER_DOCKER_CONFIG"
  chown -R "$user" "$LB_WORKER_DOCKER_CONFIG"
}

# ct_unpack_artifact KEY DIR: unpack the tarball s3://$BUCKET/KEY into DIR. KEY names its
# content (the code's SHA, an --extra-src tree's digest), so a local instance (LB_CODE_CACHE
# set) unpacks this machine's copy, downloaded by the first instance to need it: one AWS CLI
# call per machine, not one per instance. A cached copy that does not unpack is replaced
# with S3's; copies unused for a day are dropped.
ct_unpack_artifact() {
  local key=$1 dir=$2 cache=${LB_CODE_CACHE:-} tmp
  local cached=${cache:+$cache/${key##*/}}
  mkdir -p "$dir" ${cache:+"$cache"}
  ct_mktemp tmp ${cache:+-p "$cache"} # beside the cache: a hard link stays on its file system
  # A link to the cached copy, not its name, which another instance may replace meanwhile.
  if [[ -n $cached ]] && ln -f "$cached" "$tmp" 2>/dev/null && tar -xzf "$tmp" -C "$dir"; then
    touch "$tmp" # most recently used: the last to be dropped
    ct_log "$key from this machine's cache ($cache)"
  else
    ct_aws s3 cp --only-show-errors "s3://$BUCKET/$key" "$tmp"
    tar -xzf "$tmp" -C "$dir"
    if [[ -n $cached ]]; then # cached whole, replacing a copy that did not unpack
      ln -f "$tmp" "$cached"
      find "$cache" -maxdepth 1 -type f -mmin +1440 -delete 2>/dev/null || true
    fi
  fi
  rm -f "$tmp" # now: one tarball at a time on the disk
}
