#!/usr/bin/env bats
# packer/scripts/pull-images.sh against a real registry (docker-registry on 127.0.0.1,
# htpasswd auth) with the auth read from SSM (moto), into a private dockerd standing in
# for the AMI builder's: pulls, incremental skips, prunes, the logout, a refused PAT.

load helpers
load registry

ORG=bats-org
PAT='dckr_pat_BATS-AMI-PAT with space'
NAME_PARAM=/linuxbench/bats/docker-org-name
PAT_PARAM=/linuxbench/bats/docker-org-pat
BAD_PAT_PARAM=/linuxbench/bats/docker-org-pat-bad

setup_file() {
  require_docker
  [[ -n $DOCKER_SKIP ]] && return 0
  start_moto
  start_registry "$ORG" "$PAT"
  start_private_dockerd
  local image
  for image in env-a:1 env-b:1 env-c:1; do
    push_image "$REGISTRY/bats/$image" "$ORG" "$PAT"
  done
  awsm ssm put-parameter --type String --name "$NAME_PARAM" --value "$ORG" >/dev/null
  ssm_secrets "$PAT_PARAM" "$PAT" "$BAD_PAT_PARAM" "$PAT-but-wrong"
}

teardown_file() {
  stop_private_dockerd
  stop_registry
  stop_moto
  release_docker
}

setup() {
  skip_without_docker
  worker_setup
  SCRIPT="$REPO_ROOT/packer/scripts/pull-images.sh"
  # What the Packer provisioner passes, with the registry, the record dir and root's
  # Docker config moved into the test's own directory.
  export AWS_DEFAULT_REGION="$TEST_REGION" DOCKER_REGISTRY="$REGISTRY"
  export DOCKER_ORG_NAME_PARAM="$NAME_PARAM" DOCKER_ORG_PAT_PARAM="$PAT_PARAM"
  export IMAGES_FILE="$BATS_TEST_TMPDIR/images.txt" CT_AMI_RECORD_DIR="$BATS_TEST_TMPDIR/record"
  export DOCKER_CONFIG="$BATS_TEST_TMPDIR/root-docker"
}

images_file() {
  printf '%s\n' "# bats" "$@" >"$IMAGES_FILE"
}

refute_secrets_in_output() {
  refute_contains "$output" "BATS-AMI-PAT"
  refute_contains "$output" "$(printf '%s:%s' "$ORG" "$PAT" | base64 -w0)"
}

@test "pull-images: private images through the SSM login; unchanged ones skipped, unlisted pruned" {
  local a="$REGISTRY/bats/env-a:1" b="$REGISTRY/bats/env-b:1"
  images_file "$a" "$b"
  run "$SCRIPT"
  [ "$status" -eq 0 ]
  assert_in_order "$output" "step pull-images: start" "logged in to $REGISTRY as $ORG" \
    "images: 2 pulled, total 2" "step pull-images: ok in"
  assert_contains "$output" "pulled: $a in"
  assert_contains "$output" "pulled: $b in"
  refute_secrets_in_output
  # Logged out: no credential stays behind (in the AMI).
  [ ! -e "$DOCKER_CONFIG/config.json" ]
  docker image inspect "$a" "$b" >/dev/null
  assert_equal "$(cut -f1 "$CT_AMI_RECORD_DIR/images.tsv")" "$(printf '%s\n' "$a" "$b")"

  # Incremental: the registry's digests are unchanged, nothing is pulled.
  run "$SCRIPT"
  [ "$status" -eq 0 ]
  assert_contains "$output" "unchanged: $a (sha256:"
  assert_contains "$output" "images: 2 skipped, total 2"

  # env-a:1 pushed anew (from the machine's daemon, so the local copy here stays the old
  # one): its digest changed and it is pulled again; env-b, no longer listed, is removed.
  (
    unset DOCKER_HOST
    push_image "$a" "$ORG" "$PAT"
  )
  images_file "$a"
  run "$SCRIPT"
  [ "$status" -eq 0 ]
  assert_contains "$output" "pulled: $a in"
  assert_contains "$output" "removing unlisted image"
  run docker image inspect "$b"
  [ "$status" -ne 0 ]
}

@test "pull-images: a bad PAT is a clearly FAILED step, pulls nothing, logs no secret" {
  local c="$REGISTRY/bats/env-c:1"
  images_file "$c"
  export DOCKER_ORG_PAT_PARAM="$BAD_PAT_PARAM"
  run "$SCRIPT"
  [ "$status" -eq 1 ]
  assert_in_order "$output" "docker login to $REGISTRY as $ORG FAILED: " "401 Unauthorized" \
    "step pull-images: FAILED (exit 1)"
  refute_contains "$output" "pulled:"
  refute_secrets_in_output
  refute_contains "$output" "but-wrong"
  run docker image inspect "$c"
  [ "$status" -ne 0 ]
  [ ! -e "$DOCKER_CONFIG/config.json" ]
}

@test "pull-images: images built on the builder (LOCAL_IMAGES) are kept, never pulled" {
  local a="$REGISTRY/bats/env-a:1" built=bats/built-here:1
  images_file "$a"
  run "$SCRIPT"
  [ "$status" -eq 0 ]
  # An image no registry has, as build-images.sh leaves it, under its own id.
  printf 'FROM %s\nLABEL built=here\n' "$a" | docker build --quiet -t "$built" - >/dev/null
  images_file # nothing to pull
  LOCAL_IMAGES="$built bats/not-built-yet:1" run "$SCRIPT"
  [ "$status" -eq 0 ]
  refute_contains "$output" "pulled: $built"
  refute_contains "$output" "bats/not-built-yet"
  docker image inspect "$built" >/dev/null
  # Without it in LOCAL_IMAGES it is an unlisted image like any other.
  run "$SCRIPT"
  [ "$status" -eq 0 ]
  run docker image inspect "$built"
  [ "$status" -ne 0 ]
}
