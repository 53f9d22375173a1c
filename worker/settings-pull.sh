#!/usr/bin/env bash
# Step: pull the settings this fleet's jobs need ($SETTINGS, e.g. "toyarena basharena")
# with the setting's own pull command, instead of any settings on the launching machine.
# Safe to rerun.   sudo /opt/linuxbench/worker/settings-pull.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

main() {
  local setting
  for setting in ${SETTINGS:-}; do
    (cd "$LB_ROOT" && PYTHONPATH="$LB_ROOT/lib" "$LB_VENV/bin/python" -m ct_fleet.settings pull "$setting")
  done
}

main "$@"
