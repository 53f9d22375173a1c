#!/usr/bin/env bash
# Step: install Python dependencies into $LB_VENV, frozen from requirements.lock and
# served from the wheel cache (/opt/uv-cache) when present. Skipped when the venv already
# matches the lock (a baked AMI, or a rerun), and when LB_VENV_PROVIDED=1 (see lib.sh).
#   sudo /opt/linuxbench/worker/install-deps.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=worker/lib.sh
source "$here/lib.sh"

lock_hash() {
  # Either file may be missing (no requirements.lock in the repo): hash what is there.
  { cat "$LB_ROOT/requirements.lock" "$LB_ROOT/setup.cfg" 2>/dev/null || true; } | sha256sum | cut -c1-16
}

install_toolchain() {
  command -v uv >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 && command -v restic >/dev/null 2>&1 && return 0
  local scripts="$LB_ROOT/packer/scripts" step
  if [[ -d $scripts ]]; then
    # Stock Ubuntu: install at boot what the worker AMI bakes in, with the AMI's own steps.
    ct_log "stock image: installing what the worker AMI bakes in ($scripts)"
    for step in install-base install-docker install-aws-cli install-python-uv install-restic; do
      bash "$scripts/$step.sh"
    done
    return 0
  fi
  command -v uv >/dev/null 2>&1 && return 0
  ct_log "uv missing (stock image): installing Python toolchain"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip git curl unzip >/dev/null
  python3 -m pip install --quiet uv || python3 -m pip install --quiet --break-system-packages uv
}

install_venv() {
  local want stamp="$LB_VENV/.ct-fleet-lock"
  if [[ ${LB_VENV_PROVIDED:-0} == 1 ]]; then
    # Built by whoever launched this instance (a local instance shares the controller's
    # venv, made from the same lock): never rebuilt from here.
    ct_log "LB_VENV_PROVIDED=1: using the provided venv $LB_VENV"
    return 0
  fi
  want=$(lock_hash)
  if [[ -x $LB_VENV/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    ct_log "venv $LB_VENV matches the lock: nothing to install"
    return 0
  fi
  install_toolchain
  export UV_CACHE_DIR="${UV_CACHE_DIR:-/opt/uv-cache}"
  # Compiled once at install: otherwise every job's interpreter compiles inspect_ai from
  # source where bytecode cannot be written (PYTHONDONTWRITEBYTECODE, a read-only tree).
  export UV_COMPILE_BYTECODE=1
  # A venv from an older lock is replaced: uv >= 0.8 refuses to without this (the env var,
  # not --clear, so that an older uv on a stock image takes it too).
  UV_VENV_CLEAR=1 uv venv --python "${LB_PYTHON:-3.13}" "$LB_VENV"
  # requirements.lock is universal (bin/lock): its markers pick this Python's pins.
  if [[ -f $LB_ROOT/requirements.lock ]]; then
    uv pip install --python "$LB_VENV/bin/python" -r "$LB_ROOT/requirements.lock"
  fi
  uv pip install --python "$LB_VENV/bin/python" --no-deps -e "$LB_ROOT"
  echo "$want" >"$stamp"
}

# compile_code: the fleet's own code (lib/, unpacked by fetch-code) as bytecode beside it.
# An editable install is not compiled by uv, so without this each of the worker's
# interpreters would compile ct_fleet from source. A file that does not compile is left to
# fail where it is imported, with its own error.
# A local instance (LB_CODE_CACHE set) starts from the bytecode the machine's first instance
# of that code and Python compiled: unpacking the same tarball gives each source the size
# and time its bytecode records, so compileall only checks each file (0.03 s of CPU, not
# 0.3 s). A source edited by hand no longer matches, and compiles afresh.
compile_code() {
  [[ -x $LB_VENV/bin/python && -d $LB_ROOT/lib ]] || return 0
  local store jobs=0
  store=$(bytecode_store)
  if [[ -n $store && -d $store ]] && cp -R --preserve=timestamps "$store/." "$LB_ROOT/lib/"; then
    touch "$store" # most recently used: the last to be dropped
    jobs=1         # a check of each file: cheaper in one process than in a pool
  fi
  "$LB_VENV/bin/python" -m compileall -q -j "$jobs" "$LB_ROOT/lib" >/dev/null ||
    ct_log "some of $LB_ROOT/lib does not compile: the job that imports it will say why"
  [[ -z $store || -d $store ]] || keep_bytecode "$store"
}

# bytecode_store: where this machine keeps the bytecode of the code in $LB_ROOT (named by
# its .code-sha) for this venv's Python; nothing without LB_CODE_CACHE.
bytecode_store() {
  local sha tag
  [[ -n ${LB_CODE_CACHE:-} ]] || return 0
  sha=$(cat "$LB_ROOT/.code-sha" 2>/dev/null) || return 0
  [[ $sha =~ ^[0-9a-f]+$ ]] || return 0
  tag=$("$LB_VENV/bin/python" -c 'import sys; print(sys.implementation.cache_tag)') || return 0
  echo "$LB_CODE_CACHE/bytecode-$sha-$tag"
}

# keep_bytecode STORE: the __pycache__ dirs of $LB_ROOT/lib, as STORE (whole or not at all:
# built aside, then renamed; another instance that stored it first wins). Stores unused for
# a day are dropped. Best effort: without a store, each instance compiles.
keep_bytecode() {
  local store=$1 part
  mkdir -p "${store%/*}" && part=$(mktemp -d "$store.part.XXXXXX") || return 0
  if (cd "$LB_ROOT/lib" && find . -type d -name __pycache__ -prune -print0 | xargs -0 -r cp -R --preserve=timestamps --parents -t "$part") &&
    mv -T "$part" "$store" 2>/dev/null; then
    ct_log "bytecode of $LB_ROOT/lib kept for this machine's next instances ($store)"
  fi
  rm -rf "$part"
  find "$LB_CODE_CACHE" -maxdepth 1 -name 'bytecode-*' -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
}

main() {
  install_venv
  compile_code
}

main "$@"
