#!/bin/bash
# EC2 user-data of a ct-fleet worker, rendered by the controller (lib/ct_fleet/protocol/user_data.py).
# It writes the fleet's settings to $LB_HOME/etc/linuxbench/fleet.env, installs the AWS CLI
# if the image has none, and hands over to worker/bootstrap.sh, whose first step
# (fetch-code) fetches the code. It holds no secret.
#
# The two values below are base64 ([A-Za-z0-9+/=] only), so no setting can end them or
# reach the shell: FLEET_ENV is fleet.env itself (export lines the controller quoted, see
# ct_fleet.protocol.fleet_env), BOOT_KIT a tar.gz of what bootstrap needs before the code
# is there (bootstrap, fetch-code, upload-log, shutdown-instance and their libraries).
set -euo pipefail
FLEET_ENV='@FLEET_ENV@'
BOOT_KIT='@BOOT_KIT@'

# Where worker/lib.sh puts the code by default; the kit goes there and the code over it.
kit_root="${LB_ROOT:-${LB_HOME:-}/opt/linuxbench}"
mkdir -p "$kit_root"
base64 -d <<<"$BOOT_KIT" | tar -xz -C "$kit_root"
# shellcheck source=worker/lib.sh
source "$kit_root/worker/lib.sh"
CT_TAG='user-data'
mkdir -p "$LB_ETC"
base64 -d <<<"$FLEET_ENV" >"$LB_FLEET_ENV.tmp"
mv "$LB_FLEET_ENV.tmp" "$LB_FLEET_ENV"

# A failure before bootstrap takes over still ends the boot: log uploaded, power off.
on_exit() {
  ct_log "user-data failed (exit $CT_EXIT_STATUS)"
  ct_finish_boot
}

ct_tee_log "$LB_LOG"
ct_at_exit on_exit
# Stock Ubuntu has no AWS CLI, and fetch-code needs it.
if ! command -v aws >/dev/null 2>&1; then
  ct_step install-aws-cli ct_install_aws_cli
fi
exec "$LB_SCRIPTS/bootstrap.sh"
