#!/usr/bin/env bats
# bin/test's own steps: a check that fails fails its tier, whichever check it is and
# whatever runs after it. bin/test runs each tier in the background as
# `ct_step NAME ... || exit`, where bash turns errexit off for everything the step calls:
# a failed mypy followed by a passing packer once made "every tier passed".

load helpers

setup() { worker_setup; }

# tier FUNCTION [STUBS]: bin/test's FUNCTION run as its background steps run, after
# STUBS (shell code defining functions over bin/test's own).
tier() {
  local function=$1 stubs=${2:-}
  bash -c 'source "$1/bin/test"; eval "$3"; ct_step tier "$2" || exit' x "$REPO_ROOT" "$function" "$stubs"
}

# a venv whose ruff and mypy exit with these statuses: RUFF_CHECK RUFF_FORMAT MYPY
fake_venv() {
  local venv=$BATS_TEST_TMPDIR/venv
  mkdir -p "$venv/bin"
  # shellcheck disable=SC2016  # $1 expands when the fake runs
  printf '#!/usr/bin/env bash\necho "ruff $1"\n[[ $1 == check ]] && exit %s\nexit %s\n' "$1" "$2" >"$venv/bin/ruff"
  printf '#!/usr/bin/env bash\necho mypy\nexit %s\n' "$3" >"$venv/bin/mypy"
  chmod +x "$venv/bin/ruff" "$venv/bin/mypy"
  export CT_FLEET_VENV=$venv
}

@test "static checks: a failed ruff-mypy fails the tier though packer after it passes" {
  run tier run_static_checks 'run_shellcheck() { :; }; run_python_checks() { return 1; }; run_packer() { :; }'
  [ "$status" -ne 0 ]
  [[ $output == *"step ruff-mypy: FAILED"* ]]
  [[ $output == *"step packer: ok"* ]]
  [[ $output == *"step tier: FAILED"* ]]
}

@test "static checks: every check passing passes the tier" {
  run tier run_static_checks 'run_shellcheck() { :; }; run_python_checks() { :; }; run_packer() { :; }'
  [ "$status" -eq 0 ]
  [[ $output == *"step tier: ok"* ]]
}

@test "python checks: a lint error fails them, and the other checks still run" {
  fake_venv 1 0 0
  run tier run_python_checks
  [ "$status" -ne 0 ]
  [[ $output == *"ruff check"* && $output == *"ruff format"* && $output == *mypy* ]]
  fake_venv 0 0 1
  run tier run_python_checks
  [ "$status" -ne 0 ]
  fake_venv 0 0 0
  run tier run_python_checks
  [ "$status" -eq 0 ]
}

@test "packer: a template that is not formatted fails the step before validation" {
  # shellcheck disable=SC2016  # $1 expands when the stub runs
  make_stub packer '[[ $1 == version ]] && echo "Packer v1.6.6"; [[ $1 == fmt ]] && exit 3; exit 0'
  run tier run_packer
  [ "$status" -ne 0 ]
  assert_equal "$(calls packer)" "$(printf 'version\nfmt -check -diff packer')"
}

@test "background --low runs its step, and what the step starts, at a lower CPU priority" {
  # `nice` alone prints the niceness it runs at
  run bash -c 'source "$1/bin/test"; background --low low nice; collect low; background plain nice; collect plain' x "$REPO_ROOT"
  [ "$status" -eq 0 ]
  local base
  base=$(nice)
  local low=$((base + 10 > 19 ? 19 : base + 10)) # the kernel's least priority is 19
  [ "$(grep -cx "$low" <<<"$output")" -eq 1 ]
  [ "$(grep -cx "$base" <<<"$output")" -eq 1 ]
}
