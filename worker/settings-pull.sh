#!/usr/bin/env bash
# Step: make every setting of this fleet importable ($SETTINGS, e.g. "toyarena basharena")
# and run each one's own pull() hook: first install the fleet's pip requirements
# ($SETTING_REQUIREMENTS, and wheels shipped as s3://$BUCKET/$SETTING_WHEEL_KEYS) with uv,
# then find each setting in its sources (the code's examples/settings, the extra-src
# trees, installed `ct_fleet.settings` entry points). A setting that does not import
# fails this step with its name: the controller stops the fleet on that report.
# Safe to rerun.   sudo /opt/linuxbench/worker/settings-pull.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

fetch_wheels() {
  local dest=$1 key
  mkdir -p "$dest"
  for key in ${SETTING_WHEEL_KEYS:-}; do
    ct_aws s3 cp --only-show-errors "s3://$BUCKET/$key" "$dest/${key##*/}"
  done
}

install_requirements() {
  local wheels reqs=() wheel
  ct_mktemp wheels -d
  fetch_wheels "$wheels"
  # Space-separated words (the controller refuses spaces); read -a splits them without
  # globbing, which an unquoted expansion would do (foo[extra] is a glob pattern too).
  read -r -a reqs <<<"${SETTING_REQUIREMENTS:-}"
  for wheel in "$wheels"/*.whl; do
    [[ -f $wheel ]] && reqs+=("$wheel")
  done
  ((${#reqs[@]})) || return 0
  ct_log "installing setting requirements: ${reqs[*]##*/}"
  # The AMI's uv on EC2; on a local instance, the one bin/ct-fleet found (CT_FLEET_UV).
  local uv=${CT_FLEET_UV:-uv} args=(--python "$LB_VENV/bin/python")
  export UV_COMPILE_BYTECODE=1 # as install-deps: jobs import these without compiling
  # Pinned to the lock wherever the requirements overlap it.
  [[ -f $LB_ROOT/requirements.lock ]] && args+=(--constraints "$LB_ROOT/requirements.lock")
  # A local instance shares the launcher's venv, which must stay as locked: install beside it.
  [[ ${LB_VENV_PROVIDED:-0} == 1 ]] && args+=(--target "$LB_SITE")
  "$uv" pip install "${args[@]}" "${reqs[@]}"
}

pythonpath() {
  local path="$LB_ROOT/lib" tree
  [[ -d $LB_SITE ]] && path="$path:$LB_SITE"
  for tree in "$LB_EXTRA"/*/; do
    [[ -d $tree ]] && path="$path:${tree%/}"
  done
  echo "$path"
}

main() {
  local settings=()
  install_requirements
  read -ra settings <<<"${SETTINGS:-}"
  ((${#settings[@]})) || return 0
  (cd "$LB_ROOT" && PYTHONPATH="$(pythonpath)" CT_EXTRA_ROOT="$LB_EXTRA" \
    "$LB_VENV/bin/python" -m ct_fleet.settings pull "${settings[@]}")
}

main "$@"
