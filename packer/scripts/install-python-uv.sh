#!/usr/bin/env bash
# uv (system-wide in /usr/local/bin) and a uv-managed Python for root and ubuntu, plus a
# profile snippet that points uv at the shared wheel cache in /opt/uv-cache.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

install_uv() {
  local version=${UV_VERSION:-0.13.8} installer
  installer=$(mktemp)
  ct_retry 3 10 curl -fsSL "https://astral.sh/uv/$version/install.sh" -o "$installer"
  env UV_INSTALL_DIR=/usr/local/bin UV_NO_MODIFY_PATH=1 sh "$installer"
  rm -f "$installer"
  ct_log "$(/usr/local/bin/uv --version)"
}

# install_python_for USER: uv python install as USER (into ~USER/.local).
install_python_for() {
  local user=$1 version=${PYTHON_VERSION:-3.13} home
  home=$(getent passwd "$user" | cut -d: -f6)
  [[ -n $home ]] || ct_die "no home directory for $user"
  ct_retry 3 10 sudo -u "$user" -H env PATH="/usr/local/bin:$home/.local/bin:/usr/bin:/bin" \
    /usr/local/bin/uv python install "$version"
  ct_log "python for $user: $(sudo -u "$user" -H /usr/local/bin/uv python find "$version")"
}

write_profile() {
  local cache=${UV_CACHE_DIR:-/opt/uv-cache}
  install -m 0777 -d "$cache"
  cat >/etc/profile.d/ct-fleet-uv.sh <<PROFILE
# ct-fleet worker AMI: uv and its Python, with the wheel cache baked into the image.
export UV_CACHE_DIR=$cache
export UV_LINK_MODE=copy
case ":\$PATH:" in *":\$HOME/.local/bin:"*) ;; *) export PATH="\$HOME/.local/bin:\$PATH" ;; esac
PROFILE
  # Non-login shells (systemd units, user-data) read /etc/environment.
  grep -q '^UV_CACHE_DIR=' /etc/environment || echo "UV_CACHE_DIR=$cache" >>/etc/environment
}

install_python_uv() {
  local user
  install_uv
  for user in root ubuntu; do
    if id "$user" >/dev/null 2>&1; then
      install_python_for "$user"
    fi
  done
  write_profile
}

main() {
  ct_require_root
  ct_step install-python-uv install_python_uv
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
