#!/usr/bin/env bash
# Base packages for the worker AMI: git, curl, jq, unzip and CA certificates.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

install_base() {
  local -a packages=(ca-certificates curl git gnupg jq unzip)
  retry 3 10 apt_get update
  retry 3 10 apt_get install --no-install-recommends "${packages[@]}"
  log "git: $(git --version)"
}

main() {
  require_root
  run_step install-base install_base
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
