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
  # JSON, not text: values may hold tabs or newlines (a PEM key). They never reach the
  # log: they go from the CLI's output straight into the root-only file.
  out=$(ct_aws ssm get-parameters --with-decryption --names "${names[@]}" \
    --query 'Parameters[].[Name,Value]' --output json)
  (
    umask 077
    SECRETS_JSON=$out EXPECTED=${#names[@]} python3 -c '
import json, os, shlex, sys
pairs = json.loads(os.environ["SECRETS_JSON"])
if len(pairs) != int(os.environ["EXPECTED"]):
    sys.exit(1)
for path, value in pairs:
    print(f"export {path.rsplit(chr(47), 1)[-1]}={shlex.quote(value)}")
' >"$LB_SECRETS_ENV.tmp"
  ) || { rm -f "$LB_SECRETS_ENV.tmp"; return 1; }
  mv "$LB_SECRETS_ENV.tmp" "$LB_SECRETS_ENV"
}

main() {
  local instance_id deadline
  mkdir -p "$LB_ETC"
  if [[ -z ${SECRET_NAMES:-} ]]; then
    (umask 077 && : >"$LB_SECRETS_ENV")
    ct_log "no secrets for this fleet"
    return 0
  fi
  ct_require SECRET_PREFIX
  instance_id=$(ct_instance_id)
  deadline=$(($(date +%s) + ${SECRETS_WAIT:-180}))
  until fetch_all "$instance_id"; do
    (($(date +%s) < deadline)) || ct_die "secrets $SECRET_NAMES not readable under $SECRET_PREFIX/$instance_id"
    sleep 3
  done
  ct_log "fetched secrets: $SECRET_NAMES"
}

main "$@"
