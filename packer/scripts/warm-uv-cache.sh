#!/usr/bin/env bash
# Fill the uv wheel cache at UV_CACHE_DIR (default /opt/uv-cache) with the project's
# dependencies, so that `uv sync` / `uv pip install` on a worker at boot links cached
# wheels instead of downloading them. Inputs in REQUIREMENTS_DIR: requirements files
# (*.txt, or a pip-style *.lock such as the repo's requirements.lock), a setup.cfg
# (install_requires), a pyproject.toml ([project].dependencies, or `uv sync --frozen`
# when a uv.lock sits beside it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

# requirements_of FILE: requirement lines of a setup.cfg or pyproject.toml.
requirements_of() {
  local file=$1
  uv run --no-project --python "${PYTHON_VERSION:-3.13}" python - "$file" <<'PY'
import configparser
import pathlib
import sys
import tomllib

path = pathlib.Path(sys.argv[1])
if path.suffix == ".cfg":
    parser = configparser.ConfigParser()
    parser.read(path)
    lines = parser.get("options", "install_requires", fallback="").splitlines()
else:
    lines = tomllib.loads(path.read_text()).get("project", {}).get("dependencies", [])
for line in lines:
    line = line.strip()
    if line and not line.startswith("#"):
        print(line)
PY
}

# install_into VENV FILE: resolve and install FILE's requirements (fills the cache).
install_into() {
  local venv=$1 file=$2 reqs
  case $file in
    */uv.lock) ;; # used by uv sync above, with its pyproject.toml
    *.txt | *.lock)
      ct_retry 3 10 uv pip install --python "$venv/bin/python" -r "$file"
      ;;
    *.cfg | *.toml)
      reqs=$(mktemp --suffix=.txt)
      requirements_of "$file" >"$reqs"
      ct_log "$(wc -l <"$reqs") requirements from $(basename "$file")"
      ct_retry 3 10 uv pip install --python "$venv/bin/python" -r "$reqs"
      rm -f "$reqs"
      ;;
    *) ct_log "ignoring $file (not .txt, .lock, .cfg or .toml)" ;;
  esac
}

warm_uv_cache() {
  local dir=${REQUIREMENTS_DIR:-$here/requirements} work file
  export UV_CACHE_DIR=${UV_CACHE_DIR:-/opt/uv-cache} UV_LINK_MODE=copy
  export PATH="/usr/local/bin:$PATH"
  [[ -d $dir ]] || ct_die "no requirements directory at $dir"
  install -m 0777 -d "$UV_CACHE_DIR"
  work=$(mktemp -d)
  if [[ -f $dir/uv.lock && -f $dir/pyproject.toml ]]; then
    cp "$dir/uv.lock" "$dir/pyproject.toml" "$work/"
    (cd "$work" && UV_PROJECT_ENVIRONMENT="$work/venv" ct_retry 3 10 uv sync --frozen --no-install-project \
      --python "${PYTHON_VERSION:-3.13}")
  else
    uv venv --quiet --python "${PYTHON_VERSION:-3.13}" "$work/venv"
    for file in "$dir"/*; do
      [[ -f $file ]] && install_into "$work/venv" "$file"
    done
  fi
  rm -rf "$work"
  uv cache prune
  chmod -R a+rwX "$UV_CACHE_DIR"
  ct_log "uv cache: $(du -sh "$UV_CACHE_DIR" | cut -f1) at $UV_CACHE_DIR"
}

main() {
  ct_require_root
  ct_step warm-uv-cache warm_uv_cache
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
