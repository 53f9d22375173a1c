#!/usr/bin/env bash
# Docker Engine, buildx and the compose plugin from Docker's apt repository; the ubuntu
# user joins the docker group. Re-running upgrades to the repository's current version.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

add_docker_repo() {
  local keyring=/etc/apt/keyrings/docker.asc codename arch
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  arch=$(dpkg --print-architecture)
  install -m 0755 -d /etc/apt/keyrings
  ct_retry 3 10 curl -fsSL https://download.docker.com/linux/ubuntu/gpg -o "$keyring"
  chmod a+r "$keyring"
  printf 'deb [arch=%s signed-by=%s] https://download.docker.com/linux/ubuntu %s stable\n' \
    "$arch" "$keyring" "$codename" >/etc/apt/sources.list.d/docker.list
}

configure_daemon() {
  local config=/etc/docker/daemon.json
  # Bounded container logs: a worker runs many evals between reboots.
  if [[ ! -f $config ]]; then
    install -m 0755 -d /etc/docker
    cat >"$config" <<'JSON'
{
  "log-driver": "json-file",
  "log-opts": {"max-size": "50m", "max-file": "3"},
  "max-concurrent-downloads": 8
}
JSON
  fi
}

install_docker() {
  local -a packages=(docker-ce docker-ce-cli containerd.io docker-buildx-plugin docker-compose-plugin)
  add_docker_repo
  configure_daemon
  ct_retry 3 10 ct_apt_get update
  ct_retry 3 10 ct_apt_get install "${packages[@]}"
  systemctl enable --now docker
  if id ubuntu >/dev/null 2>&1; then
    usermod -aG docker ubuntu
  fi
  ct_log "$(docker --version); $(docker compose version)"
}

main() {
  ct_require_root
  ct_step install-docker install_docker
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
