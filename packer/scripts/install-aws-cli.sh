#!/usr/bin/env bash
# AWS CLI v2 from AWS's official bundle (Ubuntu's awscli package is v1).
# Re-running updates it in place.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

install_aws_cli() {
  local work url
  url="https://awscli.amazonaws.com/awscli-exe-linux-$(ct_arch_name).zip"
  work=$(mktemp -d)
  ct_retry 3 10 curl -fsSL "$url" -o "$work/awscliv2.zip"
  unzip -q "$work/awscliv2.zip" -d "$work"
  "$work/aws/install" --update --bin-dir /usr/local/bin --install-dir /usr/local/aws-cli
  rm -rf "$work"
  ct_log "$(/usr/local/bin/aws --version)"
}

main() {
  ct_require_root
  ct_step install-aws-cli install_aws_cli
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
