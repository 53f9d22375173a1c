#!/usr/bin/env bash
# restic for Inspect's checkpoints (docs/checkpoints.md): Debian trixie's build, pinned by
# checksum, so that Inspect finds one (ct_fleet/restic.py links it) instead of downloading
# its own at run time. Ubuntu 22.04's restic (0.12) is too old: its backup lacks --no-scan.
# The package is a static Go program but for glibc >= 2.34 (Ubuntu 22.04 has 2.35).
#   sudo bash packer/scripts/install-restic.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

RESTIC_DEB="${RESTIC_DEB:-pool/main/r/restic/restic_0.18.0-1+b4_amd64.deb}"
RESTIC_SHA256="${RESTIC_SHA256:-4888fb20b272a28b84ac39171b7d7f0d9a58c2aeae51ec28e54684648d66e12c}"
RESTIC_BIN="${RESTIC_BIN:-/usr/local/bin/restic}"

# restic_works BIN: it runs and its backup takes --no-scan.
restic_works() {
  "$1" backup --help 2>/dev/null | grep -q -- '--no-scan'
}

install_restic() {
  local mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}" work
  if [[ -x $RESTIC_BIN ]] && restic_works "$RESTIC_BIN"; then
    ct_log "restic: $("$RESTIC_BIN" version) already there"
    return 0
  fi
  [[ $(uname -m) == x86_64 ]] || ct_die "restic: only amd64 is pinned here (set RESTIC_DEB and RESTIC_SHA256)"
  work=$(mktemp -d)
  ct_retry 3 10 curl -fsSL -o "$work/restic.deb" "$mirror/$RESTIC_DEB"
  echo "$RESTIC_SHA256  $work/restic.deb" | sha256sum -c --quiet - || ct_die "restic: checksum mismatch for $RESTIC_DEB"
  dpkg-deb -x "$work/restic.deb" "$work/root"
  install -m 0755 "$work/root/usr/bin/restic" "$RESTIC_BIN"
  rm -rf "$work"
  restic_works "$RESTIC_BIN" || ct_die "restic: $RESTIC_BIN does not take --no-scan"
  ct_log "restic: $("$RESTIC_BIN" version)"
}

main() {
  ct_require_root
  ct_step install-restic install_restic
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
