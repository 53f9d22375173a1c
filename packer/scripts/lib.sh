# shellcheck shell=bash
# Shared helpers for the worker AMI provisioning steps (sourced, not run).
# Every line is prefixed with [ct-fleet-ami] so that bin/build-ami can pick the step
# timings ("step NAME: done in Ns") out of Packer's output.

CT_AMI_TAG="[ct-fleet-ami]"

log() {
  printf '%s %s %s\n' "$(date -u +%H:%M:%S)" "$CT_AMI_TAG" "$*" >&2
}

die() {
  log "error: $*"
  exit 1
}

# run_step NAME COMMAND [ARGS...]: run one step, log its start, end and duration.
run_step() {
  local name=$1 start=$SECONDS rc=0
  shift
  log "step $name: start"
  "$@" || rc=$?
  if ((rc != 0)); then
    log "step $name: FAILED (exit $rc) after $((SECONDS - start))s"
    return "$rc"
  fi
  log "step $name: done in $((SECONDS - start))s"
}

# retry ATTEMPTS DELAY COMMAND [ARGS...]: for network calls that fail transiently.
retry() {
  local attempts=$1 delay=$2 n=1
  shift 2
  until "$@"; do
    if ((n >= attempts)); then
      log "giving up after $n attempts: $*"
      return 1
    fi
    log "attempt $n/$attempts failed, retrying in ${delay}s: $*"
    sleep "$delay"
    n=$((n + 1))
  done
}

# apt_get ARGS...: non-interactive apt-get that waits for a running apt (cloud-init,
# unattended-upgrades) instead of failing on the dpkg lock.
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -y -q \
    -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confold "$@"
}

require_root() {
  [[ $(id -u) -eq 0 ]] || die "run as root (sudo -E bash $0)"
}

# arch_name: x86_64 or aarch64, as AWS CLI and uv downloads name them.
arch_name() {
  local machine
  machine=$(uname -m)
  case $machine in
    x86_64 | amd64) echo x86_64 ;;
    aarch64 | arm64) echo aarch64 ;;
    *) die "unsupported architecture $machine" ;;
  esac
}
