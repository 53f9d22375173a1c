#!/usr/bin/env bats
# packer/scripts/build-images.sh, the AMI step that builds the settings' own images with
# the repo's bin/build-images, on this machine's Docker (content-hashed: the images are
# reused when bin/test built them already) and records them in the AMI's images.tsv.

load helpers

setup_file() {
  export BUILD_IMAGES_SKIP=""
  local out rc=0
  out=$("$REPO_ROOT/bin/ensure-docker" start --owner bats-ami-build-images 2>&1) || rc=$?
  if ((rc == 2)); then
    BUILD_IMAGES_SKIP="no Docker here: ${out##*$'\n'}"
  elif ((rc != 0)); then
    printf '%s\n' "$out" >&2
    return 1
  fi
}

teardown_file() {
  "$REPO_ROOT/bin/ensure-docker" stop --owner bats-ami-build-images >/dev/null 2>&1 || true
}

setup() {
  [[ -z $BUILD_IMAGES_SKIP ]] || skip "$BUILD_IMAGES_SKIP"
  SCRIPT="$REPO_ROOT/packer/scripts/build-images.sh"
  export AMI_STAGE="$REPO_ROOT" CT_AMI_RECORD_DIR="$BATS_TEST_TMPDIR/record"
  LOCAL_IMAGES=$(PYTHONPATH="$REPO_ROOT/examples/settings" python3 -m toyarena.images list | xargs)
  export LOCAL_IMAGES
}

@test "build-images.sh: builds (or reuses) the setting's images and records each with its id" {
  BUILD_SETTINGS=toyarena run "$SCRIPT"
  [ "$status" -eq 0 ]
  assert_in_order "$output" "step build-images: start" "toyarena: " "step build-images: ok in"
  # bin/build-images logs in the library's format, under its own tag: not an AMI step.
  [[ $output =~ [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z\ \[build-images\]\ toyarena:\ [0-9]+\ built ]]
  local image
  for image in $LOCAL_IMAGES; do
    assert_contains "$(cat "$CT_AMI_RECORD_DIR/images.tsv")" "$image	$(docker image inspect --format '{{.Id}}' "$image")"
  done
  assert_equal "$(wc -l <"$CT_AMI_RECORD_DIR/images.tsv")" 3
}

@test "build-images.sh: an image the settings did not build fails the step" {
  BUILD_SETTINGS=toyarena LOCAL_IMAGES="$LOCAL_IMAGES ct-fleet/toyarena-nope:0" run "$SCRIPT"
  [ "$status" -eq 1 ]
  assert_contains "$output" "error: ct-fleet/toyarena-nope:0 was not built"
  assert_contains "$output" "step build-images: FAILED"
}

@test "build-images.sh: nothing to build without BUILD_SETTINGS" {
  BUILD_SETTINGS="" run "$SCRIPT"
  [ "$status" -eq 0 ]
  assert_contains "$output" "no setting builds its own images"
  [ ! -e "$CT_AMI_RECORD_DIR/images.tsv" ]
}
