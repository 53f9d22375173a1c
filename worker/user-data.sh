#!/bin/bash
# EC2 user-data of a ct-fleet worker, rendered by the controller (lib/ct_fleet/services/instances.py).
# It holds the fleet's settings and no secret. It writes them to $LB_HOME/etc/linuxbench/fleet.env
# (so steps can be rerun by hand), fetches the code at the pinned SHA and hands over to
# worker/bootstrap.sh. If fetching the code fails it still uploads its log and shuts down.
set -euo pipefail
LB_HOME="${LB_HOME:-}"
mkdir -p "$LB_HOME/etc/linuxbench" "$LB_HOME/var/log"
cat >"$LB_HOME/etc/linuxbench/fleet.env" <<'FLEET_ENV'
@FLEET_ENV@
FLEET_ENV
# shellcheck source=/dev/null
source "$LB_HOME/etc/linuxbench/fleet.env"
LOG="$LB_HOME/var/log/linuxbench-bootstrap.log"
ROOT="$LB_HOME/opt/linuxbench"

aws_cli() {
  local args=()
  [[ -n ${AWS_ENDPOINT_URL:-} ]] && args+=(--endpoint-url "$AWS_ENDPOINT_URL")
  aws --region "$AWS_REGION" "${args[@]}" "$@"
}

instance_id() {
  if [[ -n ${INSTANCE_ID:-} ]]; then echo "$INSTANCE_ID"; return; fi
  local token
  token=$(curl -sf -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
  curl -sf -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/instance-id
}

give_up() {
  echo "$(date -u +%FT%TZ) [user-data] step fetch-code: FAILED before bootstrap" >>"$LOG"
  aws_cli s3 cp --only-show-errors "$LOG" "s3://$BUCKET/$FLEET_ID/logs/$(instance_id)-bootstrap.log" || true
  shutdown -h now
  exit 1
}

if ! command -v aws >/dev/null 2>&1; then
  # Stock Ubuntu has no AWS CLI: install v2 before anything else can run.
  (apt-get update -qq && apt-get install -y -qq unzip curl >/dev/null &&
    curl -sSfo /tmp/awscliv2.zip "https://awscli.amazonaws.com/awscli-exe-linux-$(uname -m).zip" &&
    unzip -qo /tmp/awscliv2.zip -d /tmp && /tmp/aws/install) >>"$LOG" 2>&1 || give_up
fi
mkdir -p "$ROOT"
if [[ ! -x $ROOT/worker/bootstrap.sh ]] || [[ "$(cat "$ROOT/.code-sha" 2>/dev/null)" != "$CODE_SHA" ]]; then
  { aws_cli s3 cp --only-show-errors "s3://$BUCKET/artifacts/$CODE_SHA.tar.gz" - | tar -xz -C "$ROOT"; } >>"$LOG" 2>&1 || give_up
  echo "$CODE_SHA" >"$ROOT/.code-sha"
fi
exec "$ROOT/worker/bootstrap.sh"
