#!/usr/bin/env bats
# The steps that need no AWS: worker/install-deps.sh, worker/settings-pull.sh,
# worker/run-worker.sh. uv, apt-get, python3 (the system one) and sudo are recording stubs;
# the venv's python runs for real, on code laid out in $LB_ROOT as fetch-code leaves it.

load helpers

setup() {
  worker_setup
  VENV_DIR="$LB_ROOT_DIR/.venv"
  mkdir -p "$LB_ROOT_DIR"
}

# A uv stub: records argv and UV_CACHE_DIR; `uv venv ... DIR` creates DIR/bin/python.
make_uv_stub() {
  make_stub uv 'echo "UV_CACHE_DIR=${UV_CACHE_DIR-}" >>"$STUB_DIR/uv.env"
if [[ $1 == venv ]]; then dir=${*: -1}; mkdir -p "$dir/bin"; printf "#!/bin/sh\n" >"$dir/bin/python"; chmod +x "$dir/bin/python"; fi'
}

lock_files() {
  printf 'inspect-ai==0.3.0\n' >"$LB_ROOT_DIR/requirements.lock"
  printf '[metadata]\nname = ct-fleet\n' >"$LB_ROOT_DIR/setup.cfg"
}

# The venv stamp install-deps compares with: a hash of requirements.lock + setup.cfg.
lock_hash() {
  cat "$LB_ROOT_DIR/requirements.lock" "$LB_ROOT_DIR/setup.cfg" | sha256sum | cut -c1-16
}

# fake_worker_code: $LB_ROOT/lib/ct_fleet with a job loop that prints what it was given.
fake_worker_code() {
  mkdir -p "$LB_ROOT_DIR/lib/ct_fleet"
  : >"$LB_ROOT_DIR/lib/ct_fleet/__init__.py"
  cat >"$LB_ROOT_DIR/lib/ct_fleet/worker.py" <<'EOF'
import os
import sys

for key in ("PYTHONPATH", "CODE_ROOT", "WORK_DIR", "INSTANCE_ID", "FLEET_ID", "ANTHROPIC_API_KEY", "SETUP_VAR"):
    print(f"{key}={os.environ.get(key, '<unset>')}")
print(f"cwd={os.getcwd()}")
print(f"python={sys.executable}")
sys.exit(int(os.environ.get("FAKE_WORKER_EXIT", "0")))
EOF
}

# --- install-deps.sh ----------------------------------------------------------------

@test "install-deps: LB_VENV_PROVIDED=1 (a local instance) uses that venv, installs nothing" {
  make_uv_stub
  make_stub apt-get
  # No lock stamp in it: only the flag says the venv is ready.
  LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1 run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "LB_VENV_PROVIDED=1: using the provided venv $TEST_VENV"
  assert_not_called uv
  assert_not_called apt-get
}

@test "install-deps: an LB_VENV without LB_VENV_PROVIDED is built like any other" {
  make_uv_stub
  lock_files
  LB_VENV="$BATS_TEST_TMPDIR/elsewhere" run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  assert_contains "$(calls uv)" "venv --python 3.13 $BATS_TEST_TMPDIR/elsewhere"
  [ -f "$BATS_TEST_TMPDIR/elsewhere/.ct-fleet-lock" ]
}

@test "install-deps: a venv matching the lock is left alone" {
  make_uv_stub
  lock_files
  mkdir -p "$VENV_DIR/bin" && printf '#!/bin/sh\n' >"$VENV_DIR/bin/python" && chmod +x "$VENV_DIR/bin/python"
  lock_hash >"$VENV_DIR/.ct-fleet-lock"
  run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "venv $VENV_DIR matches the lock: nothing to install"
  assert_not_called uv
}

@test "install-deps: builds the venv from the lock with uv and the wheel cache, then stamps it" {
  make_uv_stub
  make_stub apt-get
  lock_files
  run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls uv)" "$(printf '%s\n' \
    "venv --python 3.13 $VENV_DIR" \
    "pip install --python $VENV_DIR/bin/python -r $LB_ROOT_DIR/requirements.lock" \
    "pip install --python $VENV_DIR/bin/python --no-deps -e $LB_ROOT_DIR")"
  assert_equal "$(sort -u "$STUB_DIR/uv.env")" "UV_CACHE_DIR=/opt/uv-cache"
  assert_equal "$(cat "$VENV_DIR/.ct-fleet-lock")" "$(lock_hash)"
  assert_not_called apt-get
  # A changed lock is a reinstall.
  echo 'extra==1.0' >>"$LB_ROOT_DIR/requirements.lock"
  run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls uv | wc -l)" 6
  assert_equal "$(cat "$VENV_DIR/.ct-fleet-lock")" "$(lock_hash)"
}

@test "install-deps: code without requirements.lock installs just the package" {
  make_uv_stub
  printf '[metadata]\nname = ct-fleet\n' >"$LB_ROOT_DIR/setup.cfg"
  run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls uv)" "$(printf '%s\n' \
    "venv --python 3.13 $VENV_DIR" \
    "pip install --python $VENV_DIR/bin/python --no-deps -e $LB_ROOT_DIR")"
  assert_equal "$(cat "$VENV_DIR/.ct-fleet-lock")" "$(sha256sum <"$LB_ROOT_DIR/setup.cfg" | cut -c1-16)"
}

@test "install-deps: a stock image without uv gets the toolchain first" {
  make_uv_stub
  mkdir -p "$BATS_TEST_TMPDIR/later"
  mv "$STUB_BIN/uv" "$BATS_TEST_TMPDIR/later/uv"
  make_stub apt-get
  # The system python3 "installs" uv by dropping the uv stub on PATH.
  make_stub python3 "[[ \$* == '-m pip install --quiet uv' ]] && cp '$BATS_TEST_TMPDIR/later/uv' \"\$(dirname \"\$0\")/uv\"; exit 0"
  lock_files
  # Only the stubs and the base system on PATH: no uv anywhere.
  PATH="$STUB_BIN:/usr/bin:/bin" run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "uv missing (stock image): installing Python toolchain"
  assert_equal "$(calls apt-get)" "$(printf '%s\n' "update -qq" "install -y -qq python3-venv python3-pip git curl unzip")"
  assert_equal "$(calls python3)" "-m pip install --quiet uv"
  assert_contains "$(calls uv)" "venv --python 3.13 $VENV_DIR"
  [ -f "$VENV_DIR/.ct-fleet-lock" ]
}

@test "install-deps: a stock image runs the AMI's own install steps from the shipped code" {
  make_uv_stub
  lock_files
  mkdir -p "$LB_ROOT_DIR/packer/scripts"
  for step in install-base install-docker install-aws-cli install-python-uv install-restic; do
    printf '#!/usr/bin/env bash\necho %s >>"%s"\n' "$step" "$BATS_TEST_TMPDIR/steps" >"$LB_ROOT_DIR/packer/scripts/$step.sh"
  done
  # No docker on PATH: this is a stock image.
  PATH="$STUB_BIN:/usr/bin:/bin" run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "stock image: installing what the worker AMI bakes in"
  assert_equal "$(cat "$BATS_TEST_TMPDIR/steps")" "$(printf '%s\n' install-base install-docker install-aws-cli install-python-uv install-restic)"
  [ -f "$VENV_DIR/.ct-fleet-lock" ]
}

# unpack_code DIR: DIR/lib from the same tarball every time (sources keep its times, as
# fetch-code's unpacking does), stamped with the code's SHA.
unpack_code() {
  local tarball="$BATS_TEST_TMPDIR/code.tar"
  if [[ ! -f $tarball ]]; then
    mkdir -p "$BATS_TEST_TMPDIR/src/lib/pkg"
    printf 'X = 1\n' >"$BATS_TEST_TMPDIR/src/lib/pkg/__init__.py"
    printf 'Y = 2\n' >"$BATS_TEST_TMPDIR/src/lib/pkg/mod.py"
    touch -d '2020-01-01' "$BATS_TEST_TMPDIR"/src/lib/pkg/*.py
    tar -cf "$tarball" -C "$BATS_TEST_TMPDIR/src" lib
  fi
  mkdir -p "$1"
  tar -xf "$tarball" -C "$1"
  echo 1234abcd >"$1/.code-sha"
}

@test "install-deps: the next instance of the same code on this machine takes its bytecode; an edited source compiles afresh" {
  local tag pyc
  tag=$("$TEST_VENV/bin/python" -c 'import sys; print(sys.implementation.cache_tag)')
  pyc="lib/pkg/__pycache__/mod.$tag.pyc"
  export LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1 LB_CODE_CACHE="$BATS_TEST_TMPDIR/cache"
  fleet_env CODE_SHA=1234abcd
  unpack_code "$LB_ROOT_DIR"
  run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "bytecode of $LB_ROOT_DIR/lib kept"
  local store="$LB_CODE_CACHE/bytecode-1234abcd-$tag"
  cmp "$LB_ROOT_DIR/$pyc" "$store/pkg/__pycache__/mod.$tag.pyc"
  # The store's bytecode, marked by its time: a copy keeps it, compiling would not.
  touch -d '2001-01-01' "$store/pkg/__pycache__/mod.$tag.pyc"

  another_instance
  local second="$LB_HOME/opt/linuxbench"
  unpack_code "$second"
  LB_ROOT="$second" run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  [[ $output != *"bytecode of"* ]]
  assert_equal "$(date -r "$second/$pyc" +%Y)" 2001
  assert_equal "$(cd "$second/lib" && "$TEST_VENV/bin/python" -B -c 'import pkg.mod; print(pkg.mod.Y)')" 2

  # A source edited on this instance: its own bytecode, the store left as it was.
  printf 'Y = 30\n' >"$second/lib/pkg/mod.py"
  LB_ROOT="$second" run "$WORKER_DIR/install-deps.sh"
  [ "$status" -eq 0 ]
  [ "$(date -r "$second/$pyc" +%Y)" != 2001 ]
  assert_equal "$(date -r "$store/pkg/__pycache__/mod.$tag.pyc" +%Y)" 2001
  assert_equal "$(cd "$second/lib" && "$TEST_VENV/bin/python" -B -c 'import pkg.mod; print(pkg.mod.Y)')" 30
}

# --- settings-pull.sh ---------------------------------------------------------------

# The real ct_fleet package and settings, plus a setting that exists only in $LB_ROOT:
# pulling it proves the step runs the fetched code, not whatever else is installed.
settings_code() {
  mkdir -p "$LB_ROOT_DIR/examples"
  cp -r "$REPO_ROOT/lib" "$LB_ROOT_DIR/lib"
  cp -r "$REPO_ROOT/examples/settings" "$LB_ROOT_DIR/examples/settings"
  mkdir -p "$LB_ROOT_DIR/examples/settings/batsetting"
  cat >"$LB_ROOT_DIR/examples/settings/batsetting/__init__.py" <<'EOF'
import os


def catalog():
    return {"env-a": {}, "env-b": {}}


def pull():
    with open(os.environ["PULL_TRACE"], "a") as f:
        f.write(f"pulled batsetting in {os.getcwd()}\n")
EOF
  export PULL_TRACE="$BATS_TEST_TMPDIR/pull-trace"
}

@test "settings-pull: pulls every setting in SETTINGS with the fetched code" {
  settings_code
  fleet_env "SETTINGS=toyarena batsetting"
  LB_VENV="$TEST_VENV" run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -eq 0 ]
  assert_in_order "$output" "setting toyarena: ready from examples" \
    "setting batsetting: ready from examples (2 environments)"
  assert_equal "$(cat "$PULL_TRACE")" "pulled batsetting in $LB_ROOT_DIR"
}

@test "settings-pull: a setting on an extra-src tree is found there (after worker-setup unpacked it)" {
  settings_code
  mkdir -p "$LB_HOME/opt/linuxbench-extra/mytree/treesetting"
  printf 'def catalog():\n    return {"lab": {}}\n' >"$LB_HOME/opt/linuxbench-extra/mytree/treesetting/__init__.py"
  fleet_env "SETTINGS=treesetting"
  LB_VENV="$TEST_VENV" run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "setting treesetting: ready from extra-src mytree (1 environments)"
}

@test "settings-pull: an unknown setting fails the step by name, before the next one" {
  settings_code
  fleet_env "SETTINGS=nosuch batsetting"
  LB_VENV="$TEST_VENV" run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -ne 0 ]
  assert_contains "$output" "setting nosuch: FAILED: setting 'nosuch' found in no source"
  [ ! -e "$PULL_TRACE" ]
}

@test "settings-pull: a setting that does not import fails with its own error" {
  settings_code
  mkdir -p "$LB_ROOT_DIR/examples/settings/brokensetting"
  echo 'import not_installed_anywhere' >"$LB_ROOT_DIR/examples/settings/brokensetting/__init__.py"
  fleet_env "SETTINGS=brokensetting"
  LB_VENV="$TEST_VENV" run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -ne 0 ]
  assert_contains "$output" "setting brokensetting: FAILED: setting 'brokensetting' does not import: ModuleNotFoundError"
}

@test "settings-pull: requirements install beside a shared venv, and their settings import" {
  settings_code
  local wheel
  wheel=$("$TEST_VENV/bin/python" "$REPO_ROOT/tests/testkit/wheelmaker.py" "$BATS_TEST_TMPDIR/wheels" batplug)
  fleet_env "SETTINGS=batplug" "SETTING_REQUIREMENTS=$wheel"
  # shellcheck source=bin/ensure-venv
  CT_FLEET_UV=$(source "$REPO_ROOT/bin/ensure-venv" && find_uv) LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1 \
    run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "setting batplug: ready from ct-fleet-batplug (1 environments)"
  # In a directory named site-packages: Inspect takes what is there for installed packages.
  [ -d "$LB_HOME/opt/linuxbench-site/site-packages/batplug" ]
  # The shared venv is untouched.
  run "$TEST_VENV/bin/python" -c 'import batplug'
  [ "$status" -ne 0 ]
}

# site_key VENV LOCK [--wheel PATH | SPEC]...: the controller's name for a set of
# requirements installed in LB_SITE_CACHE (controller/planning/overlay.py).
py_site_key() {
  "$TEST_VENV/bin/python" - "$REPO_ROOT/lib" "$@" <<'PY'
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
from ct_fleet.controller.planning.overlay import site_key

venv, lock, *items = sys.argv[2:]
wheels = [Path(w) for w in items if w.endswith(".whl")]
print(site_key([s for s in items if not s.endswith(".whl")], wheels, venv, Path(lock)))
PY
}

# A uv stub that makes the --target directory it is given, holding one package, after
# UV_STUB_SLEEP seconds (default 0).
make_target_uv_stub() {
  # shellcheck disable=SC2016  # expanded when the stub runs
  make_stub uv 'sleep "${UV_STUB_SLEEP:-0}"
prev=
for arg; do
  if [[ $prev == --target ]]; then mkdir -p "$arg/stubpkg"; fi
  prev=$arg
done'
}

@test "settings-pull: local instances share one install per machine, under the controller's key" {
  settings_code
  cp "$REPO_ROOT/requirements.lock" "$LB_ROOT_DIR/requirements.lock"
  local wheel key cache="$BATS_TEST_TMPDIR/sites" site="opt/linuxbench-site/site-packages"
  wheel=$("$TEST_VENV/bin/python" "$REPO_ROOT/tests/testkit/wheelmaker.py" "$BATS_TEST_TMPDIR/wheels" batplug)
  fleet_env "SETTINGS=batplug" "SETTING_REQUIREMENTS=$wheel"
  # shellcheck source=bin/ensure-venv
  CT_FLEET_UV=$(source "$REPO_ROOT/bin/ensure-venv" && find_uv) LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1 \
    LB_SITE_CACHE="$cache" run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "setting batplug: ready from ct-fleet-batplug (1 environments)"
  # The directory the controller's probe installs the same set in: one install for both.
  key=$(py_site_key "$TEST_VENV" "$LB_ROOT_DIR/requirements.lock" "$wheel")
  assert_contains "$output" "installing them into $cache/$key, shared by this machine's instances"
  assert_equal "$(readlink "$LB_HOME/$site")" "$cache/$key/site-packages"
  [ -f "$cache/$key/site-packages/batplug/__init__.py" ]
  [ -f "$cache/$key/.complete" ]
  # No temp directory left: the set and its lock file only.
  assert_equal "$(cd "$cache" && find . -mindepth 1 -maxdepth 1 | sort | tr '\n' ' ')" "./.$key.lock ./$key "
  # A second instance of this machine links the same install and installs nothing.
  make_stub uv
  mkdir -p "$BATS_TEST_TMPDIR/home2"
  LB_HOME="$BATS_TEST_TMPDIR/home2" LB_ROOT="$LB_ROOT_DIR" LB_ETC="${FLEET_ENV%/*}" \
    LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1 LB_SITE_CACHE="$cache" run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "setting requirements: already installed in $cache/$key"
  assert_contains "$output" "setting batplug: ready from ct-fleet-batplug (1 environments)"
  assert_not_called uv
  assert_equal "$(readlink "$BATS_TEST_TMPDIR/home2/$site")" "$cache/$key/site-packages"
  # The shared venv is untouched.
  run "$TEST_VENV/bin/python" -c 'import batplug'
  [ "$status" -ne 0 ]
}

@test "settings-pull: two instances installing one set at once: one installs, the other takes it" {
  local cache="$BATS_TEST_TMPDIR/sites" key home2="$BATS_TEST_TMPDIR/home2" a b
  make_target_uv_stub
  export UV_STUB_SLEEP=1 # both reach the install while the first holds it
  fleet_env "SETTING_REQUIREMENTS=foo[ab] bar>=1"
  mkdir -p "$home2"
  LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1 LB_SITE_CACHE="$cache" \
    "$WORKER_DIR/settings-pull.sh" >"$BATS_TEST_TMPDIR/a.log" 2>&1 &
  a=$!
  LB_HOME="$home2" LB_ROOT="$LB_ROOT_DIR" LB_ETC="${FLEET_ENV%/*}" \
    LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1 LB_SITE_CACHE="$cache" \
    "$WORKER_DIR/settings-pull.sh" >"$BATS_TEST_TMPDIR/b.log" 2>&1 &
  b=$!
  wait "$a"
  wait "$b"
  assert_equal "$(calls uv | wc -l)" 1
  key=$(py_site_key "$TEST_VENV" "$LB_ROOT_DIR/requirements.lock" "foo[ab]" "bar>=1")
  assert_contains "$(cat "$BATS_TEST_TMPDIR/a.log" "$BATS_TEST_TMPDIR/b.log")" "already installed in $cache/$key"
  assert_equal "$(readlink "$LB_HOME/opt/linuxbench-site/site-packages")" "$cache/$key/site-packages"
  assert_equal "$(readlink "$home2/opt/linuxbench-site/site-packages")" "$cache/$key/site-packages"
  [ -d "$cache/$key/site-packages/stubpkg" ]
}

@test "settings-pull: a killed install's leftovers go, and the link replaces an install of the instance's own" {
  local cache="$BATS_TEST_TMPDIR/sites" key site="$LB_HOME/opt/linuxbench-site/site-packages"
  make_target_uv_stub
  fleet_env "SETTING_REQUIREMENTS=foo"
  key=$(py_site_key "$TEST_VENV" "$LB_ROOT_DIR/requirements.lock" foo)
  mkdir -p "$cache/.$key-Xk1lld/site-packages/half" "$site/own"
  LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1 LB_SITE_CACHE="$cache" run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "removing $cache/.$key-Xk1lld, left by an install that was killed"
  [ ! -e "$cache/.$key-Xk1lld" ]
  assert_contains "$(calls uv)" "pip install --python $TEST_VENV/bin/python --target $cache/.$key-"
  assert_contains "$(calls uv)" "/site-packages foo"
  assert_contains "$output" "removing $site, an install of this instance's own"
  assert_equal "$(readlink "$site")" "$cache/$key/site-packages"
  [ -d "$site/stubpkg" ]
}

@test "settings-pull: a failed shared install leaves nothing to be taken for complete" {
  local cache="$BATS_TEST_TMPDIR/sites"
  make_stub uv 'exit 3'
  fleet_env "SETTING_REQUIREMENTS=foo"
  LB_VENV="$TEST_VENV" LB_VENV_PROVIDED=1 LB_SITE_CACHE="$cache" run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -eq 3 ]
  # Only the lock file: the temp directory went with the script, and no set is there.
  assert_equal "$(find "$cache" -mindepth 1 -not -name '.*.lock')" ""
  [ ! -e "$LB_HOME/opt/linuxbench-site/site-packages" ]
}

@test "settings-pull: requirements reach uv as written, never globbed" {
  settings_code
  make_uv_stub
  # foo[ab] (foo with the extra "ab") is also a glob that matches fooa: an unquoted
  # expansion would have uv install "fooa".
  mkdir -p "$BATS_TEST_TMPDIR/cwd"
  cd "$BATS_TEST_TMPDIR/cwd"
  touch fooa
  fleet_env "SETTINGS=toyarena" "SETTING_REQUIREMENTS=foo[ab] bar"
  LB_VENV="$TEST_VENV" run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -eq 0 ]
  assert_contains "$(calls uv)" "pip install --python $TEST_VENV/bin/python foo[ab] bar"
}

@test "settings-pull: no SETTINGS does nothing" {
  # No code and no venv: anything it tried to run would fail.
  run "$WORKER_DIR/settings-pull.sh"
  [ "$status" -eq 0 ]
  assert_equal "$output" ""
}

# --- run-worker.sh ------------------------------------------------------------------

@test "run-worker: runs the job loop with secrets, setup env, extra trees and paths" {
  fake_worker_code
  fleet_env FLEET_ID=fleet-rw BUCKET=bucket-rw
  printf 'export ANTHROPIC_API_KEY=%q\n' 'sk key' >"$LB_HOME/etc/linuxbench/secrets.env"
  # Written by a WORKER_SETUP script, without `export`: run-worker exports it.
  echo 'SETUP_VAR=from-setup' >"$LB_HOME/opt/linuxbench-worker-setup.env"
  mkdir -p "$LB_HOME/opt/linuxbench-extra/tools-a" "$LB_HOME/opt/linuxbench-extra/tools-b"
  touch "$LB_HOME/opt/linuxbench-extra/not-a-tree.txt"
  LB_VENV="$TEST_VENV" FAKE_WORKER_EXIT=5 run "$WORKER_DIR/run-worker.sh"
  # exec: the job loop's exit status is the step's.
  [ "$status" -eq 5 ]
  local extra="$LB_HOME/opt/linuxbench-extra"
  assert_equal "$output" "$(printf '%s\n' \
    "PYTHONPATH=$LB_ROOT_DIR/lib:$LB_ROOT_DIR/examples/settings:$extra/tools-a:$extra/tools-b" \
    "CODE_ROOT=$LB_ROOT_DIR" \
    "WORK_DIR=$LB_HOME/var/lib/linuxbench/jobs" \
    "INSTANCE_ID=$INSTANCE_ID" \
    "FLEET_ID=fleet-rw" \
    "ANTHROPIC_API_KEY=sk key" \
    "SETUP_VAR=from-setup" \
    "cwd=$LB_ROOT_DIR" \
    "python=$TEST_VENV/bin/python")"
}

@test "run-worker: without FLEET_ID it stops, naming the setting" {
  fake_worker_code
  fleet_env BUCKET=bucket-rw
  LB_VENV="$TEST_VENV" run "$WORKER_DIR/run-worker.sh"
  [ "$status" -eq 1 ]
  assert_contains "$output" "FLEET_ID is not set"
  refute_contains "$output" "CODE_ROOT="
}

@test "run-worker: WORKER_USER runs the loop through sudo with a work dir it owns" {
  fake_worker_code
  make_stub sudo
  fleet_env FLEET_ID=fleet-rw BUCKET=bucket-rw WORKER_USER=nobody
  LB_VENV="$TEST_VENV" run "$WORKER_DIR/run-worker.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls sudo)" "--preserve-env -u nobody $TEST_VENV/bin/python -m ct_fleet.worker"
  assert_equal "$(stat -c %U "$LB_HOME/var/lib/linuxbench/jobs")" nobody
  refute_contains "$output" "CODE_ROOT="
}
