#!/usr/bin/env bash
# Provision the ct-fleet worker AMI: run every step in order, each timed. Packer runs it
# as root on the builder (see ../worker-ami.pkr.hcl); each step is also a script of its
# own that can be re-run by hand on a builder or a worker:
#   sudo -E bash /tmp/ct-fleet-ami/packer/scripts/pull-images.sh
# Settings come from the environment (defaults in each step): BUILD_KIND, IMAGES_FILE,
# REQUIREMENTS_DIR, PYTHON_VERSION, UV_VERSION, PULL_PARALLELISM, DOCKER_ORG_*_PARAM,
# BUILD_SETTINGS, LOCAL_IMAGES (AMI_STAGE mirrors the repo: bin/, examples/settings/).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

wait_for_boot() {
  # cloud-init still runs apt on first boot of a fresh instance; let it finish.
  if command -v cloud-init >/dev/null 2>&1; then
    cloud-init status --wait >/dev/null || ct_log "cloud-init reported an error; continuing"
  fi
}

main() {
  local step start=$SECONDS
  local -a steps=(install-base install-docker install-aws-cli install-python-uv install-restic pull-images build-images warm-uv-cache finalize)
  ct_require_root
  ct_log "provisioning a ${BUILD_KIND:-fresh} worker AMI (build ${BUILD_ID:-manual})"
  ct_step wait-for-boot wait_for_boot
  for step in "${steps[@]}"; do
    # Each step logs its own "step NAME: ok in Ns"; a failure stops the build.
    bash "$here/$step.sh"
  done
  ct_log "provisioning took $((SECONDS - start))s"
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
