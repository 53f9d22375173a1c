#!/usr/bin/env bash
# Last step before Packer stops the builder and snapshots it: record what was built in
# /etc/ct-fleet-ami/build.json, and strip what must not be baked into every worker
# (registry credentials, Packer's temporary SSH key, cloud-init state, apt lists, logs).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

record_build() {
  local dir=/etc/ct-fleet-ami
  install -m 0755 -d "$dir"
  jq -n \
    --arg build_id "${BUILD_ID:-manual}" \
    --arg build_kind "${BUILD_KIND:-fresh}" \
    --arg source_ami "${SOURCE_AMI:-}" \
    --arg built_at "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --arg docker "$(docker --version 2>/dev/null || true)" \
    --arg uv "$(/usr/local/bin/uv --version 2>/dev/null || true)" \
    --arg aws "$(/usr/local/bin/aws --version 2>/dev/null || true)" \
    '{build_id: $build_id, build_kind: $build_kind, source_ami: $source_ami,
      built_at: $built_at, docker: $docker, uv: $uv, aws_cli: $aws}' >"$dir/build.json"
  ct_log "recorded $dir/build.json"
}

scrub() {
  local home
  rm -f /root/.docker/config.json
  home=$(getent passwd ubuntu | cut -d: -f6 || true)
  if [[ -n $home ]]; then
    rm -f "$home/.docker/config.json" "$home/.bash_history"
    # Packer's temporary key; workers get their own keys (or Instance Connect) at launch.
    : >"$home/.ssh/authorized_keys" 2>/dev/null || true
  fi
  rm -f /root/.bash_history
  ct_apt_get clean
  rm -rf /var/lib/apt/lists/*
  if command -v cloud-init >/dev/null 2>&1; then
    cloud-init clean --logs
  fi
  journalctl --vacuum-time=1s >/dev/null 2>&1 || true
  # What Packer staged (AMI_STAGE: these scripts, the library, the image list), never a
  # checkout they were run from by hand.
  if [[ -n ${AMI_STAGE:-} && $here == "$AMI_STAGE"/* ]]; then
    rm -rf "$AMI_STAGE"
  fi
}

finalize() {
  record_build
  scrub
  sync
}

main() {
  ct_require_root
  # It scrubs the machine for imaging (SSH keys, cloud-init state): builders only.
  [[ -n ${BUILD_ID:-} ]] || ct_die "BUILD_ID is unset: finalize.sh runs only on an AMI builder (Packer sets it)"
  ct_step finalize finalize
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
