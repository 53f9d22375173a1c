#!/usr/bin/env bash
# The entry points' area file of lib/bash/ct.sh (sourced, never run): what only bin/ needs.
# Kept out of ct.sh, which every worker carries in its user-data under EC2's 16 KB. Packer
# stages it with bin/build-images and bin/ensure-docker (packer/worker-ami.pkr.hcl).

# shellcheck source=lib/bash/ct.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/bash/ct.sh"

# ct_debian_mirror: the mirror this host's apt takes Debian's main archive from, which
# serves every suite (debootstrap's bookworm, ensure-docker's trixie):
# CT_FLEET_DEBIAN_MIRROR when set, else the first "<suite>/main" source whose release is
# o=Debian (an -updates or -security suite may sit elsewhere; an Ubuntu host, the AMI
# builder, has none), else deb.debian.org.
ct_debian_mirror() {
  local mirror=${CT_FLEET_DEBIAN_MIRROR:-}
  if [[ -z $mirror ]]; then
    mirror=$(apt-cache policy 2>/dev/null | awk '
      $2 ~ /^https?:/ { url = ($3 ~ /^[a-z]+\/main$/) ? $2 : ""; next }
      url != "" && $1 == "release" && ("," $2 ",") ~ /,o=Debian,/ { print url; exit }') || true
  fi
  echo "${mirror:-http://deb.debian.org/debian}"
}

# ct_trixie_source: Debian trixie as an apt source pinned at priority 100, so that nothing
# comes from it unless asked for by name (pkg/trixie): Docker (bin/ensure-docker) and
# restic (bin/test) are newer there than in bookworm. Needs root; apt-get update after.
ct_trixie_source() {
  local mirror
  mirror=$(ct_debian_mirror)
  printf 'deb %s trixie main\n' "$mirror" >/etc/apt/sources.list.d/ct-fleet-trixie.list
  printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' >/etc/apt/preferences.d/ct-fleet-trixie
  ct_log "apt source: $mirror trixie (pinned at priority 100)"
}
