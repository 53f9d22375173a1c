#!/usr/bin/env bash
# Base packages for the worker AMI: git, curl, jq, unzip and CA certificates.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

install_base() {
  local -a packages=(ca-certificates curl git gnupg jq unzip)
  ct_retry 3 10 ct_apt_get update
  ct_retry 3 10 ct_apt_get install --no-install-recommends "${packages[@]}"
  ct_log "git: $(git --version)"
}

main() {
  ct_require_root
  ct_step install-base install_base
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
