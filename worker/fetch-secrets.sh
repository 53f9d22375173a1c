#!/usr/bin/env bash
# Step: fetch this instance's secrets (API keys, GH_TOKEN, Docker registry auth) from
# SSM SecureStrings under $SECRET_PREFIX/<instance-id>/ into an env file only root can read.
# The controller writes them right after launch, so wait for them up to SECRETS_WAIT seconds.
# Safe to rerun: it rewrites the file.   sudo /opt/linuxbench/worker/fetch-secrets.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

fetch_all() {
  local instance_id=$1 names=() name out
  for name in $SECRET_NAMES; do
    names+=("$SECRET_PREFIX/$instance_id/$name")
  done
  # Values never reach the log: the CLI prints them only into the root-only file below.
  out=$(lb_aws ssm get-parameters --with-decryption --names "${names[@]}" \
    --query 'Parameters[].[Name,Value]' --output text)
  [[ $(grep -c . <<<"$out") -eq ${#names[@]} ]] || return 1
  local tmp="$LB_SECRETS_ENV.tmp" path value
  (
    umask 077
    : >"$tmp"
    while IFS=$'\t' read -r path value; do
      printf 'export %s=%q\n' "${path##*/}" "$value" >>"$tmp"
    done <<<"$out"
  )
  mv "$tmp" "$LB_SECRETS_ENV"
}

main() {
  local instance_id deadline
  mkdir -p "$LB_ETC"
  if [[ -z ${SECRET_NAMES:-} ]]; then
    (umask 077 && : >"$LB_SECRETS_ENV")
    lb_log "no secrets for this fleet"
    return 0
  fi
  lb_require SECRET_PREFIX
  instance_id=$(lb_instance_id)
  deadline=$(($(date +%s) + ${SECRETS_WAIT:-180}))
  until fetch_all "$instance_id"; do
    (($(date +%s) < deadline)) || lb_die "secrets $SECRET_NAMES not readable under $SECRET_PREFIX/$instance_id"
    sleep 3
  done
  lb_log "fetched secrets: $SECRET_NAMES"
}

main "$@"
