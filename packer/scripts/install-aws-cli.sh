#!/usr/bin/env bash
# AWS CLI v2 from AWS's official bundle (ct_install_aws_cli in lib/bash/ct.sh, which the
# user-data of a stock image runs too). Re-running updates it in place.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

main() {
  ct_require_root
  ct_step install-aws-cli ct_install_aws_cli
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
