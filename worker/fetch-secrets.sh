#!/usr/bin/env bash
# Step: fetch this instance's secrets (API keys, GH_TOKEN, Docker registry auth) from its
# SSM SecureString $SECRET_PREFIX/<instance-id>/secrets into an env file only root can read.
# The controller writes them right after launch, so wait for them up to SECRETS_WAIT seconds.
# Safe to rerun: it rewrites the file.   sudo /opt/linuxbench/worker/fetch-secrets.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

# read_values NAME...: the JSON list of those parameters' decrypted values (missing ones
# are left out). JSON, not text: values may hold tabs or newlines (a PEM key). They never
# reach the log: they go from the CLI's output straight into the root-only file.
read_values() {
  ct_aws ssm get-parameters --with-decryption --names "$@" --query 'Parameters[].[Name,Value]' --output json
}

# One parameter, secrets, holds them all as {"of": N, "secrets": {...}}; when they overflow
# 4 KB the controller goes on in secrets.1 .. secrets.(N-1), read in one more call.
fetch_all() {
  local first="$SECRET_PREFIX/$1/secrets" head rest=() i of more='[]'
  head=$(read_values "$first")
  of=$(SECRETS_JSON=$head python3 -c '
import json, os
pairs = json.loads(os.environ["SECRETS_JSON"])
print(json.loads(pairs[0][1])["of"] if pairs else 0)
') || return 1
  ((of > 0)) || return 1
  for ((i = 1; i < of; i++)); do
    rest+=("$first.$i")
  done
  if ((${#rest[@]})); then
    more=$(read_values "${rest[@]}")
  fi
  (
    umask 077
    NAMES=$SECRET_NAMES HEAD_JSON=$head MORE_JSON=$more python3 -c '
import json, os, shlex, sys
pairs = json.loads(os.environ["HEAD_JSON"]) + json.loads(os.environ["MORE_JSON"])
bundles = [json.loads(value) for _, value in pairs]
found = {k: v for b in bundles for k, v in b["secrets"].items()}
if len(bundles) != bundles[0]["of"] or not set(os.environ["NAMES"].split()) <= found.keys():
    sys.exit(1)
for name in os.environ["NAMES"].split():
    print(f"export {name}={shlex.quote(found[name])}")
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
