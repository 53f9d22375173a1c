#!/usr/bin/env bats
# worker/worker-setup.sh: extra-src trees, the worker user, the WORKER_SETUP script.

load helpers

setup_file() {
  start_moto
  make_bucket
  # Two extra-src tarballs, shared read-only by the tests: tools-a holds the setup script,
  # which records what it saw into the file named by $SETUP_TRACE.
  local src="$BATS_FILE_TMPDIR/extra" out="$BATS_FILE_TMPDIR/extra-out"
  mkdir -p "$src/a/tools-a/bin" "$src/b/tools-b" "$out"
  cat >"$src/a/tools-a/bin/setup.sh" <<'EOF'
echo "setup ran"
{
  echo "user=${LINUXBENCH_WORKER_USER-unset}"
  echo "pwd=$PWD"
} >"$SETUP_TRACE"
EOF
  echo b >"$src/b/tools-b/data.txt"
  make_tarball "$src/a" "$out/tools-a.tar.gz"
  make_tarball "$src/b" "$out/tools-b.tar.gz"
  awsm s3 cp --only-show-errors --recursive "$out" "s3://$TEST_BUCKET/extra-src/"
}
teardown_file() { stop_moto; }

setup() {
  worker_setup
  EXTRA="$LB_HOME/opt/linuxbench-extra"
  export SETUP_TRACE="$BATS_TEST_TMPDIR/setup-trace"
  fleet_env "BUCKET=$TEST_BUCKET" "AWS_REGION=$TEST_REGION"
  mkdir -p "$LB_ROOT_DIR"
  make_stub useradd
  make_stub usermod
}

@test "worker-setup: nothing configured: creates the extra dir, calls nothing" {
  run "$WORKER_DIR/worker-setup.sh"
  [ "$status" -eq 0 ]
  [ -d "$EXTRA" ]
  assert_not_called useradd
  assert_not_called usermod
  [ ! -e "$SETUP_TRACE" ]
}

@test "worker-setup: unpacks every EXTRA_SRC_KEYS tarball, runs WORKER_SETUP" {
  fleet_env "EXTRA_SRC_KEYS=extra-src/tools-a.tar.gz extra-src/tools-b.tar.gz" \
    "WORKER_SETUP=tools-a/bin/setup.sh"
  run "$WORKER_DIR/worker-setup.sh"
  [ "$status" -eq 0 ]
  assert_in_order "$output" "unpacked extra-src/tools-a.tar.gz" "unpacked extra-src/tools-b.tar.gz" \
    "running worker setup tools-a/bin/setup.sh" "setup ran"
  [ -f "$EXTRA/tools-a/bin/setup.sh" ]
  assert_equal "$(cat "$EXTRA/tools-b/data.txt")" b
  # Run from its own directory, with LINUXBENCH_WORKER_USER set (empty: no worker user).
  assert_equal "$(cat "$SETUP_TRACE")" "$(printf 'user=\npwd=%s' "$EXTRA/tools-a/bin")"
}

@test "worker-setup: a WORKER_SETUP missing from the trees fails, naming it" {
  fleet_env "WORKER_SETUP=tools-a/bin/setup.sh"
  run "$WORKER_DIR/worker-setup.sh"
  [ "$status" -eq 1 ]
  assert_contains "$output" "worker_setup script tools-a/bin/setup.sh not found in the extra-src trees"
  [ ! -e "$SETUP_TRACE" ]
}

@test "worker-setup: a missing extra-src key fails the step" {
  fleet_env "EXTRA_SRC_KEYS=extra-src/no-such.tar.gz"
  run "$WORKER_DIR/worker-setup.sh"
  [ "$status" -ne 0 ]
  assert_contains "$output" "extra-src/no-such.tar.gz"
}

@test "worker-setup: local instances share one download of each tree through LB_CODE_CACHE" {
  export LB_CODE_CACHE="$BATS_TEST_TMPDIR/artifacts"
  # A key named for its content, as the controller's are.
  awsm s3 cp --only-show-errors "s3://$TEST_BUCKET/extra-src/tools-b.tar.gz" "s3://$TEST_BUCKET/artifacts/extra-tools-b-5eed.tar.gz"
  fleet_env "EXTRA_SRC_KEYS=artifacts/extra-tools-b-5eed.tar.gz"
  run "$WORKER_DIR/worker-setup.sh"
  [ "$status" -eq 0 ]
  refute_contains "$output" "from this machine's cache"
  # Another instance of this machine, the tree gone from S3: unpacked from the cache.
  awsm s3 rm --only-show-errors "s3://$TEST_BUCKET/artifacts/extra-tools-b-5eed.tar.gz"
  another_instance
  run "$WORKER_DIR/worker-setup.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "artifacts/extra-tools-b-5eed.tar.gz from this machine's cache"
  assert_equal "$(cat "$LB_HOME/opt/linuxbench-extra/tools-b/data.txt")" b
  assert_equal "$(ls -A "$LB_CODE_CACHE")" "extra-tools-b-5eed.tar.gz"
}

@test "worker-setup: an existing WORKER_USER joins docker, owns the code, is passed to the script" {
  fleet_env "WORKER_USER=nobody" "EXTRA_SRC_KEYS=extra-src/tools-a.tar.gz" "WORKER_SETUP=tools-a/bin/setup.sh"
  # The docker group exists on a worker AMI; here getent says so.
  make_stub getent
  touch "$LB_ROOT_DIR/some-file"
  run "$WORKER_DIR/worker-setup.sh"
  [ "$status" -eq 0 ]
  assert_not_called useradd
  assert_equal "$(calls getent)" "group docker"
  assert_equal "$(calls usermod)" "-aG docker nobody"
  assert_equal "$(stat -c %U "$LB_ROOT_DIR/some-file")" nobody
  # Its own Docker config dir (registry login), private to it.
  assert_equal "$(stat -c '%U %a' "$LB_HOME/var/lib/linuxbench/worker-docker")" "nobody 700"
  assert_contains "$output" "worker user nobody ready"
  assert_contains "$(cat "$SETUP_TRACE")" "user=nobody"
}

@test "worker-setup: a new WORKER_USER is created; no docker group, no usermod" {
  fleet_env "WORKER_USER=ct-bats-worker"
  # The user does not exist (id fails) and cannot be created here: useradd and chown are stubs.
  make_stub id '[[ $1 == ct-bats-worker ]] && exit 1; exec /usr/bin/id "$@"'
  make_stub chown
  make_stub getent 'exit 2'
  run "$WORKER_DIR/worker-setup.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(calls useradd)" "--create-home --shell /bin/bash ct-bats-worker"
  assert_not_called usermod
  assert_equal "$(calls chown)" "$(printf -- '-R ct-bats-worker %s\n' "$LB_ROOT_DIR" "$LB_HOME/var/lib/linuxbench/worker-docker")"
}
