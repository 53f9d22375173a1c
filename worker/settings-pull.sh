#!/usr/bin/env bash
# Step: make every setting of this fleet importable ($SETTINGS, e.g. "toyarena basharena")
# and run each one's own pull() hook: first install the fleet's pip requirements
# ($SETTING_REQUIREMENTS, and wheels shipped as s3://$BUCKET/$SETTING_WHEEL_KEYS) with uv,
# then find each setting in its sources (the code's examples/settings, the extra-src
# trees, installed `ct_fleet.settings` entry points). A setting that does not import
# fails this step with its name: the controller stops the fleet on that report.
#
# Where the requirements go: on EC2, into the instance's own venv. A local instance shares
# the controller's venv, which stays as locked, so they go beside it, in LB_SITE (on the
# jobs' PYTHONPATH). Its path holds a "site-packages" directory: only there does Inspect
# take a module for part of an installed package, name its tasks `package/task` and
# record its version in the log's `packages`. With LB_SITE_CACHE (set by the local
# instance runner) each set of requirements is installed once per machine, in
# LB_SITE_CACHE/<key>/site-packages, under the key the controller's probe gives the same
# set (so that install is shared too), and LB_SITE is a link to it.
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

# uv_install [--target DIR] REQUIREMENT...: uv pip install for the job loop's Python,
# pinned to the lock wherever the requirements overlap it.
uv_install() {
  # The AMI's uv on EC2; on a local instance, the one bin/ct-fleet found (CT_FLEET_UV).
  local uv=${CT_FLEET_UV:-uv} args=(--python "$LB_VENV/bin/python")
  export UV_COMPILE_BYTECODE=1 # as install-deps: jobs import these without compiling
  [[ -f $LB_ROOT/requirements.lock ]] && args+=(--constraints "$LB_ROOT/requirements.lock")
  "$uv" pip install "${args[@]}" "$@"
}

# site_key REQUIREMENT...: the name of this set's directory in LB_SITE_CACHE. The
# controller's probe names its install of the same set the same way
# (lib/ct_fleet/controller/planning/overlay.py, site_key): change them together.
site_key() {
  local lock=- item sum
  if [[ -f $LB_ROOT/requirements.lock ]]; then
    sum=$(sha256sum <"$LB_ROOT/requirements.lock")
    lock=${sum%% *}
  fi
  {
    printf '%s\n' "ct-fleet site 1" "venv $LB_VENV" "lock $lock"
    for item in "$@"; do
      if [[ $item == *.whl && -f $item ]]; then
        sum=$(sha256sum <"$item")
        printf 'wheel %s %s\n' "${item##*/}" "${sum%% *}"
      else
        printf 'spec %s\n' "$item"
      fi
    done | LC_ALL=C sort
  } | sha256sum | cut -c1-16
}

# install_shared KEY LOCKED REQUIREMENT...: the set in LB_SITE_CACHE/KEY, installed now
# unless the controller's probe or another instance did. Installed into a temp directory
# renamed into place when complete: no instance ever sees half of it. LOCKED=1: the
# caller holds the key's lock on fd 9, so nobody else is installing this key.
install_shared() {
  local key=$1 locked=$2 dest work stale
  shift 2
  dest="$LB_SITE_CACHE/$key"
  if ((locked)) && ! flock -n 9; then
    ct_log "another instance or run is installing these requirements: waiting for it"
    flock 9
  fi
  if [[ -f $dest/.complete ]]; then
    ct_log "setting requirements: already installed in $dest, shared by this machine's instances"
    return 0
  fi
  if ((locked)); then
    for stale in "$LB_SITE_CACHE/.$key-"*; do
      if [[ -d $stale ]]; then
        ct_log "removing $stale, left by an install that was killed"
        rm -rf -- "$stale"
      fi
    done
  fi
  ct_mktemp work -d "$LB_SITE_CACHE/.$key-XXXXXX"
  ct_log "installing them into $dest, shared by this machine's instances"
  uv_install --target "$work/site-packages" "$@"
  touch "$work/.complete"
  if ! mv -T -- "$work" "$dest"; then
    [[ -f $dest/.complete ]] || ct_die "could not move the install $work to $dest"
    ct_log "installed meanwhile by another instance: using that one"
  fi
}

# link_site TARGET: LB_SITE (on the jobs' PYTHONPATH) becomes a link to TARGET.
link_site() {
  local target=$1
  mkdir -p "$(dirname "$LB_SITE")"
  if [[ -d $LB_SITE && ! -L $LB_SITE ]]; then
    ct_log "removing $LB_SITE, an install of this instance's own"
    rm -rf -- "$LB_SITE"
  fi
  ln -sfn -- "$target" "$LB_SITE"
  ct_log "LB_SITE: $LB_SITE -> $target"
}

# share_requirements REQUIREMENT...: the set installed once on this machine
# (LB_SITE_CACHE), and LB_SITE a link to its site-packages.
share_requirements() {
  local key
  key=$(site_key "$@")
  mkdir -p "$LB_SITE_CACHE"
  if command -v flock >/dev/null 2>&1; then
    install_shared "$key" 1 "$@" 9>"$LB_SITE_CACHE/.$key.lock"
  else
    install_shared "$key" 0 "$@"
  fi
  link_site "$LB_SITE_CACHE/$key/site-packages"
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
  if [[ ${LB_VENV_PROVIDED:-0} != 1 ]]; then
    uv_install "${reqs[@]}" # into this instance's own venv (EC2)
  elif [[ -n ${LB_SITE_CACHE:-} ]]; then
    share_requirements "${reqs[@]}" # a local instance: the venv and the install are shared
  else
    # A shared venv, which must stay as locked: install beside it, never into a shared install.
    if [[ -L $LB_SITE ]]; then
      rm -f -- "$LB_SITE"
    fi
    uv_install --target "$LB_SITE" "${reqs[@]}"
  fi
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
