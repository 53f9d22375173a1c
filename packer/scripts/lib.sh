#!/usr/bin/env bash
# The AMI provisioning steps' area file of lib/bash/ct.sh (sourced, not run). Every line is
# tagged [ct-fleet-ami], so that bin/build-ami can pick the step timings out of Packer's
# output (ct_fleet.ami.packer.AMI_STEP_TAG). On the builder Packer stages lib/bash/ct.sh
# beside these scripts as it is in the repo.

# shellcheck disable=SC2034  # read by ct_log
CT_TAG=ct-fleet-ami
# shellcheck source=lib/bash/ct.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/bash/ct.sh"

ct_require_root() {
  [[ $(id -u) -eq 0 ]] || ct_die "run as root (sudo -E bash $0)"
}
