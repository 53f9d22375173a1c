#!/usr/bin/env bats
# bin/ensure-venv's compile_packages: a fresh venv takes the bytecode of the last one built
# from the same locks out of this machine's store, and compiles only what is stale; and
# check_python, which refuses a Python without tarfile's data filter; and stamp_hash, which
# says when a venv must be rebuilt.

load helpers

setup() {
  export XDG_CACHE_HOME="$BATS_TEST_TMPDIR/cache"
  STORE="$XDG_CACHE_HOME/ct-fleet/bytecode"
}

# venv NAME: a small venv (no pip) holding one package, pkg, whose files are copied with
# their times from one source, as uv links them from its cache.
venv() {
  local dir="$BATS_TEST_TMPDIR/$1" site
  "$TEST_VENV/bin/python" -m venv --without-pip "$dir" >/dev/null
  site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  if [[ ! -d $BATS_TEST_TMPDIR/pkg ]]; then
    mkdir -p "$BATS_TEST_TMPDIR/pkg/sub"
    echo 'A = 1' >"$BATS_TEST_TMPDIR/pkg/__init__.py"
    echo 'B = 2' >"$BATS_TEST_TMPDIR/pkg/sub/__init__.py"
  fi
  cp -rp "$BATS_TEST_TMPDIR/pkg" "$site/"
  echo "$site"
}

compile() {
  bash -c 'source "$1"; compile_packages "$2" lockhash-test "$3"' x "$REPO_ROOT/bin/ensure-venv" "$@"
}

inode() { stat -c %i "$1"; }

@test "compile_packages: a fresh venv takes the store's bytecode; a stale file is compiled again" {
  local first second third tag
  first=$(venv first)
  compile "$BATS_TEST_TMPDIR/first" 1
  tag=$("$BATS_TEST_TMPDIR/first/bin/python" -c 'import sys; print(sys.implementation.cache_tag)')
  local pyc="pkg/sub/__pycache__/__init__.$tag.pyc"
  [ -f "$first/$pyc" ]
  # The store holds the first venv's bytecode as hard links, and nothing else.
  assert_equal "$(ls "$STORE")" "lockhash-test-$tag"
  assert_equal "$(inode "$STORE/lockhash-test-$tag/$pyc")" "$(inode "$first/$pyc")"

  second=$(venv second)
  compile "$BATS_TEST_TMPDIR/second" 1
  assert_equal "$(inode "$second/$pyc")" "$(inode "$first/$pyc")" # linked, not compiled
  "$BATS_TEST_TMPDIR/second/bin/python" -c 'import pkg.sub'

  third=$(venv third)
  echo 'B = 3' >"$third/pkg/sub/__init__.py" # another source than the store's bytecode
  touch -d '2001-01-01' "$third/pkg/sub/__init__.py"
  compile "$BATS_TEST_TMPDIR/third" 1
  [ "$(inode "$third/$pyc")" != "$(inode "$first/$pyc")" ]
  assert_equal "$(inode "$third/pkg/__pycache__/__init__.$tag.pyc")" "$(inode "$first/pkg/__pycache__/__init__.$tag.pyc")"
  run "$BATS_TEST_TMPDIR/third/bin/python" -c 'import pkg.sub; print(pkg.sub.B)'
  assert_equal "$output" 3
}

@test "compile_packages: the store of other locks is replaced by this one's" {
  local site tag
  site=$(venv only)
  tag=$("$BATS_TEST_TMPDIR/only/bin/python" -c 'import sys; print(sys.implementation.cache_tag)')
  mkdir -p "$STORE/oldhash-test-$tag" "$STORE/oldhash-runtime-$tag"
  compile "$BATS_TEST_TMPDIR/only" 1
  [ -f "$site/pkg/__pycache__/__init__.$tag.pyc" ]
  assert_equal "$(ls "$STORE")" "lockhash-test-$tag"
}


check() {
  bash -c 'source "$1"; check_python "$2" && echo accepted' x "$REPO_ROOT/bin/ensure-venv" "$1"
}

@test "check_python: a Python before 3.11.4 (no tarfile data filter) is refused in one line, exit 2" {
  mkdir -p "$BATS_TEST_TMPDIR/bin"
  printf '#!/bin/sh\nexit 1\n' >"$BATS_TEST_TMPDIR/bin/python3.11"
  chmod +x "$BATS_TEST_TMPDIR/bin/python3.11"
  run check "$BATS_TEST_TMPDIR/bin/python3.11"
  [ "$status" -eq 2 ]
  [ "${#lines[@]}" -eq 1 ]
  assert_contains "$output" "is not Python 3.11.4 or newer (tarfile's data filter): set CT_FLEET_PYTHON"
  run check "$TEST_VENV/bin/python"
  [ "$status" -eq 0 ]
  assert_equal "$output" accepted
}

@test "stamp_hash: ruff, mypy and pytest settings rebuild no venv; what installs does" {
  local root="$BATS_TEST_TMPDIR/root" before
  mkdir -p "$root"
  printf '[metadata]\nname = x\n' >"$root/setup.cfg"
  echo 'a==1' >"$root/requirements.lock"
  printf '[build-system]\nrequires = ["setuptools>=68"]\n\n[tool.mypy]\nstrict = true\n\n[[tool.mypy.overrides]]\nmodule = ["a.*"]\n' >"$root/pyproject.toml"
  stamp() { bash -c 'source "$1"; stamp_hash "$2"' x "$REPO_ROOT/bin/ensure-venv" "$root"; }
  before=$(stamp)
  sed -i 's/strict = true/strict = false/; s/"a.\*"/"b.*"/' "$root/pyproject.toml"
  printf '\n[tool.ruff]\nline-length = 99\n' >>"$root/pyproject.toml"
  assert_equal "$(stamp)" "$before"
  printf '\n[project]\nname = "x"\n' >>"$root/pyproject.toml" # a table after the tool ones counts
  [ "$(stamp)" != "$before" ]
  before=$(stamp)
  sed -i 's/setuptools>=68/setuptools>=69/' "$root/pyproject.toml"
  [ "$(stamp)" != "$before" ]
  before=$(stamp)
  echo 'a==2' >"$root/requirements.lock"
  [ "$(stamp)" != "$before" ]
}
