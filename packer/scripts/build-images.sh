#!/usr/bin/env bash
# Build the images the settings make themselves, offline, with the repo's bin/build-images
# (content-hashed tags: an image already in the AMI is reused), from the files Packer
# stages where they are in the repo (AMI_STAGE: bin/, examples/settings/). Runs after
# pull-images, which keeps these (LOCAL_IMAGES). Each built image and its image id is
# added to the AMI's record (images.tsv).
#   sudo -E BUILD_SETTINGS=toyarena LOCAL_IMAGES="..." bash /tmp/ct-fleet-ami/packer/scripts/build-images.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

RECORD_DIR="${CT_AMI_RECORD_DIR:-/etc/ct-fleet-ami}"

build_images() {
  # The stage (or a checkout) is two levels above packer/scripts/.
  local repo=${AMI_STAGE:-$here/../..} setting image id
  if [[ -z ${BUILD_SETTINGS:-} ]]; then
    ct_log "no setting builds its own images"
    return 0
  fi
  for setting in $BUILD_SETTINGS; do
    "$repo/bin/build-images" "$setting" || return 1
  done
  install -m 0755 -d "$RECORD_DIR"
  for image in ${LOCAL_IMAGES:-}; do
    if ! id=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null); then
      ct_log "error: $image was not built by bin/build-images $BUILD_SETTINGS"
      return 1
    fi
    printf '%s\t%s\n' "$image" "$id" >>"$RECORD_DIR/images.tsv"
    ct_log "built: $image ($id)"
  done
}

main() {
  ct_require_root
  ct_step build-images build_images
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
