#!/usr/bin/env bats
# worker/fetch-code.sh: s3://$BUCKET/artifacts/$CODE_SHA.tar.gz -> $LB_HOME/opt/linuxbench.

load helpers

setup_file() {
  start_moto
  make_bucket
}
teardown_file() { stop_moto; }

setup() {
  worker_setup
  SHA=$(fake_sha)
  fleet_env "BUCKET=$TEST_BUCKET" "CODE_SHA=$SHA" "AWS_REGION=$TEST_REGION"
}

@test "fetch-code: downloads and unpacks the artifact, stamps .code-sha" {
  mkdir -p "$BATS_TEST_TMPDIR/tree/worker"
  echo "code at $SHA" >"$BATS_TEST_TMPDIR/tree/MARKER"
  printf '#!/bin/sh\necho hi\n' >"$BATS_TEST_TMPDIR/tree/worker/step.sh"
  chmod +x "$BATS_TEST_TMPDIR/tree/worker/step.sh"
  upload_code "$SHA" "$BATS_TEST_TMPDIR/tree"
  # Code of an older SHA in place (a reused home): replaced by the pinned one.
  mkdir -p "$LB_ROOT_DIR"
  echo 0000000000000000000000000000000000000000 >"$LB_ROOT_DIR/.code-sha"

  run "$WORKER_DIR/fetch-code.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "unpacked code $SHA into $LB_ROOT_DIR"
  assert_equal "$(cat "$LB_ROOT_DIR/MARKER")" "code at $SHA"
  [ -x "$LB_ROOT_DIR/worker/step.sh" ]
  assert_equal "$(cat "$LB_ROOT_DIR/.code-sha")" "$SHA"
}

@test "fetch-code: a rerun at the same SHA skips the download" {
  upload_code "$SHA"
  run "$WORKER_DIR/fetch-code.sh"
  [ "$status" -eq 0 ]
  # Gone from S3 and changed locally: a rerun must neither download nor re-extract.
  awsm s3 rm --only-show-errors "s3://$TEST_BUCKET/artifacts/$SHA.tar.gz"
  echo "edited on the worker" >"$LB_ROOT_DIR/MARKER"

  run "$WORKER_DIR/fetch-code.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "code $SHA already in $LB_ROOT_DIR"
  assert_equal "$(cat "$LB_ROOT_DIR/MARKER")" "edited on the worker"
}

@test "fetch-code: a missing artifact fails non-zero and stamps nothing" {
  run "$WORKER_DIR/fetch-code.sh"
  [ "$status" -ne 0 ]
  assert_contains "$output" "artifacts/$SHA.tar.gz"
  assert_contains "$output" "404"
  [ ! -e "$LB_ROOT_DIR/.code-sha" ]
}

@test "fetch-code: without BUCKET it stops, naming the setting" {
  : >"$FLEET_ENV"
  fleet_env "CODE_SHA=$SHA"
  run "$WORKER_DIR/fetch-code.sh"
  [ "$status" -eq 1 ]
  assert_contains "$output" "BUCKET is not set"
}

@test "fetch-code: a corrupt artifact fails and stamps nothing" {
  printf 'not a gzip stream' >"$BATS_TEST_TMPDIR/corrupt.tar.gz"
  s3_put "$BATS_TEST_TMPDIR/corrupt.tar.gz" "artifacts/$SHA.tar.gz"
  run "$WORKER_DIR/fetch-code.sh"
  [ "$status" -ne 0 ]
  refute_contains "$output" "unpacked code"
  [ ! -e "$LB_ROOT_DIR/.code-sha" ]
}

@test "fetch-code: local instances share one download per SHA through LB_CODE_CACHE" {
  export LB_CODE_CACHE="$BATS_TEST_TMPDIR/code-cache"
  upload_code "$SHA"
  run "$WORKER_DIR/fetch-code.sh"
  [ "$status" -eq 0 ]
  refute_contains "$output" "from this machine's cache"
  [ -f "$LB_CODE_CACHE/$SHA.tar.gz" ]
  # Another instance of this machine, the artifact gone from S3: unpacked from the cache.
  awsm s3 rm --only-show-errors "s3://$TEST_BUCKET/artifacts/$SHA.tar.gz"
  another_instance
  run "$WORKER_DIR/fetch-code.sh"
  [ "$status" -eq 0 ]
  assert_contains "$output" "artifacts/$SHA.tar.gz from this machine's cache"
  assert_equal "$(cat "$LB_HOME/opt/linuxbench/MARKER")" "code at $SHA"
  assert_equal "$(cat "$LB_HOME/opt/linuxbench/.code-sha")" "$SHA"
  # Nothing but the artifact is left in the cache.
  assert_equal "$(ls -A "$LB_CODE_CACHE")" "$SHA.tar.gz"
}

@test "fetch-code: a cached artifact that does not unpack is dropped and S3's is fetched" {
  export LB_CODE_CACHE="$BATS_TEST_TMPDIR/code-cache"
  mkdir -p "$LB_CODE_CACHE"
  printf 'not a gzip stream' >"$LB_CODE_CACHE/$SHA.tar.gz"
  upload_code "$SHA"
  run "$WORKER_DIR/fetch-code.sh"
  [ "$status" -eq 0 ]
  assert_equal "$(cat "$LB_ROOT_DIR/MARKER")" "code at $SHA"
  tar -tzf "$LB_CODE_CACHE/$SHA.tar.gz" >/dev/null # the cache now holds S3's artifact
}
