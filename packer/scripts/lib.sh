#!/usr/bin/env bash
# The AMI provisioning steps' area file of lib/bash/ct.sh (sourced, not run): apt and
# architecture helpers. Every line is tagged [ct-fleet-ami], so that bin/build-ami can
# pick the step timings out of Packer's output (ct_fleet.ami.packer.AMI_STEP_TAG). On the
# builder Packer stages lib/bash/ct.sh beside these scripts as it is in the repo.

# shellcheck disable=SC2034  # read by ct_log
CT_TAG=ct-fleet-ami
# shellcheck source=lib/bash/ct.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/bash/ct.sh"

# ct_apt_get ARGS...: non-interactive apt-get that waits for a running apt (cloud-init,
# unattended-upgrades) instead of failing on the dpkg lock.
ct_apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -y -q \
    -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confold "$@"
}

ct_require_root() {
  [[ $(id -u) -eq 0 ]] || ct_die "run as root (sudo -E bash $0)"
}

# ct_arch_name: x86_64 or aarch64, as AWS CLI and uv downloads name them.
ct_arch_name() {
  local machine
  machine=$(uname -m)
  case $machine in
    x86_64 | amd64) echo x86_64 ;;
    aarch64 | arm64) echo aarch64 ;;
    *) ct_die "unsupported architecture $machine" ;;
  esac
}
