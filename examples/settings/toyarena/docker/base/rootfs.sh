#!/usr/bin/env bash
# Make the toyarena base image's root filesystem in DIR: Debian bookworm minbase plus
# packages.txt, trimmed of caches and docs. bin/build-images runs it as root, tars DIR and
# imports it (`docker import`). This file and packages.txt are the base image's content
# hash: any change to them builds a new base (and so new environment images).
#   examples/settings/toyarena/docker/base/rootfs.sh DIR MIRROR
set -euo pipefail

SUITE=bookworm
TARGET=""

packages() {
  local file=$1
  sed -e 's/#.*//' "$file" | xargs | tr ' ' ,
}

unmount_all() {
  local dir=$1 mnt
  for mnt in proc sys dev/pts; do
    if mountpoint -q "$dir/$mnt" 2>/dev/null; then
      umount -l "$dir/$mnt" || true
    fi
  done
}

trim() {
  local dir=$1
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb \
    "$dir"/var/cache/debconf/*-old "$dir"/var/log/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/* \
    "$dir"/usr/share/info/* "$dir"/usr/share/locale/* "$dir"/tmp/* "$dir"/debootstrap
  # No stale identity or resolver config from the build host.
  : >"$dir/etc/machine-id"
  rm -f "$dir/etc/resolv.conf" "$dir/etc/hostname"
}

main() {
  local dir=${1:?usage: rootfs.sh DIR MIRROR} mirror=${2:?usage: rootfs.sh DIR MIRROR} here include
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  include=$(packages "$here/packages.txt")
  mkdir -p "$dir"
  TARGET=$dir
  trap 'unmount_all "$TARGET"' EXIT
  debootstrap --variant=minbase ${include:+--include="$include"} "$SUITE" "$dir" "$mirror"
  unmount_all "$dir"
  trim "$dir"
}

main "$@"
