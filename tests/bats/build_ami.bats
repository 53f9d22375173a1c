#!/usr/bin/env bats
# bin/build-ami argument handling and --dry-run (no AWS: the endpoint is a closed port),
# and the pure helpers of the Packer provisioning scripts (packer/scripts).

setup_file() {
  # The first use of bin/build-ami may (re)build the venv, which prints to stderr.
  "$BATS_TEST_DIRNAME/../../bin/ensure-venv" >/dev/null 2>&1
}

setup() {
  root="$(cd "$BATS_TEST_DIRNAME/../.." && pwd)"
  scripts="$root/packer/scripts"
  # Nothing may reach AWS: a closed local port answers every call with "refused".
  export AWS_ENDPOINT_URL=http://127.0.0.1:9
  export AWS_ACCESS_KEY_ID=ctfleetembedded AWS_SECRET_ACCESS_KEY=ctfleetembedded
  export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1 CT_FLEET_MAX_ATTEMPTS=1 COLUMNS=200
  unset AWS_PROFILE AWS_SESSION_TOKEN
}

@test "build-ami: unknown flag exits 2 with a one-line error" {
  run "$root/bin/build-ami" --bogus
  [ "$status" -eq 2 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ ${lines[0]} == "build-ami: error: No such option '--bogus' (see --help)" ]]
}

@test "build-ami: a bad --region or --var exits 2 before anything runs" {
  run "$root/bin/build-ami" --dry-run --region nowhere
  [ "$status" -eq 2 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ ${lines[0]} == *"--region 'nowhere' is not an AWS region name"* ]]
  run "$root/bin/build-ami" --var no-equals-sign
  [ "$status" -eq 2 ]
  [[ $output == *"expected KEY=VALUE"* ]]
}

@test "build-ami: --help lists the options" {
  run "$root/bin/build-ami" --help
  [ "$status" -eq 0 ]
  for flag in --fresh --region --dry-run --ssm-param; do
    [[ $output == *"$flag"* ]]
  done
}

@test "build-ami --dry-run: plans, validates the template, changes nothing" {
  command -v packer >/dev/null || skip "packer not installed"
  run "$root/bin/build-ami" --dry-run --fresh --region us-west-2
  [ "$status" -eq 0 ]
  [[ $output == *"worker AMI build (dry run)"* ]]
  [[ $output == *"us-west-2"* ]]
  [[ $output == *"fresh"* ]]
  [[ $output == *"dry run: template valid; nothing launched, SSM unchanged"* ]]
  [[ $output == *"packer validate"* ]]
}

@test "build-ami: a missing packer exits 2 naming the fix" {
  run "$root/bin/build-ami" --dry-run --packer /nonexistent/packer
  [ "$status" -eq 2 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ ${lines[0]} == "build-ami: error: /nonexistent/packer not found: apt-get install packer"* ]]
}

@test "pull-images.sh: read_images drops comments, blanks and duplicates" {
  printf '%s\n' '# header' 'repo/a:1' '' '  repo/b@sha256:abc   # pinned' 'repo/a:1' >"$BATS_TEST_TMPDIR/images.txt"
  run bash -c "source '$scripts/pull-images.sh' && read_images '$BATS_TEST_TMPDIR/images.txt'"
  [ "$status" -eq 0 ]
  [ "$output" = $'repo/a:1\nrepo/b@sha256:abc' ]
}

@test "pull-images.sh: read_images rejects two images on a line" {
  printf 'repo/a:1 repo/b:2\n' >"$BATS_TEST_TMPDIR/images.txt"
  run bash -c "source '$scripts/pull-images.sh' && read_images '$BATS_TEST_TMPDIR/images.txt'"
  [ "$status" -ne 0 ]
  [[ $output == *"one image per line"* ]]
}

@test "packer/images.txt parses" {
  run bash -c "source '$scripts/pull-images.sh' && read_images '$root/packer/images.txt'"
  [ "$status" -eq 0 ]
}

@test "lib.sh: steps log the [ct-fleet-ami] timing line bin/build-ami parses, and pass failures on" {
  run bash -c "source '$scripts/lib.sh' && ct_step demo true"
  [ "$status" -eq 0 ]
  [[ $output =~ \ \[ct-fleet-ami\]\ step\ demo:\ ok\ in\ [0-9]+s$ ]]
  # Packer puts its prefix before each line: the build's parser still reads it.
  run python - "$root/lib" "    amazon-ebs.worker: ${lines[-1]}" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from ct_fleet.ami.packer import AMI_STEP_TAG
from ct_fleet.protocol import steplog
step = steplog.parse_step(sys.argv[2])
print(step.tag == AMI_STEP_TAG, step.name, step.event)
PY
  [ "$output" = "True demo ok" ]
  run bash -c "set -e; source '$scripts/lib.sh'; f() { false; echo reached; }; ct_step demo f"
  [ "$status" -eq 1 ]
  [[ $output == *"[ct-fleet-ami] step demo: FAILED (exit 1)"* ]]
  [[ $output != *reached* ]]
}

@test "lib.sh: ct_arch_name names the machine as the downloads do" {
  run bash -c "source '$scripts/lib.sh' && ct_arch_name"
  [ "$status" -eq 0 ]
  [[ $output == x86_64 || $output == aarch64 ]]
}

# A stand-in `docker` (Docker is not AWS): local images and registry digests live in
# files under $FAKE_DOCKER; every pull and removal is logged there.
make_fake_docker() {
  export FAKE_DOCKER="$BATS_TEST_TMPDIR/docker"
  mkdir -p "$FAKE_DOCKER/bin" "$FAKE_DOCKER/local" "$FAKE_DOCKER/remote"
  cat >"$FAKE_DOCKER/bin/docker" <<'SH'
#!/usr/bin/env bash
set -euo pipefail
key() { printf '%s' "$1" | tr '/:@' '___'; }
state=$FAKE_DOCKER
case "$1 ${2:-}" in
  "image inspect")
    image=${*: -1}
    [[ -f $state/local/$(key "$image") ]] || exit 1
    read -r digest id <"$state/local/$(key "$image")"
    case "$*" in
      *RepoDigests*) echo "${image%%[:@]*}@$digest" ;;
      *.Id*) echo "$id" ;;
    esac ;;
  "buildx imagetools")
    image=${*: -1}
    [[ -f $state/remote/$(key "$image") ]] || exit 1
    printf '{"digest": "%s"}\n' "$(cat "$state/remote/$(key "$image")")" ;;
  "pull --quiet")
    image=$3
    [[ -f $state/remote/$(key "$image") ]] || exit 1
    echo "$image" >>"$state/pulls"
    digest=$(cat "$state/remote/$(key "$image")")
    echo "$digest sha256:id-${digest#sha256:}" >"$state/local/$(key "$image")" ;;
  "image ls")
    cat "$state"/local/* 2>/dev/null | awk '{print $2}' ;;
  "image rm")
    id=${*: -1}
    echo "$id" >>"$state/removed"
    grep -l -- "$id" "$state"/local/* | xargs rm -f ;;
  "image prune") ;;
  *) echo "fake docker: unsupported: $*" >&2; exit 2 ;;
esac
SH
  chmod +x "$FAKE_DOCKER/bin/docker"
}

fake_image() { # fake_image local|remote IMAGE DIGEST
  local key
  key=$(printf '%s' "$2" | tr '/:@' '___')
  if [[ $1 == local ]]; then
    echo "$3 sha256:id-${3#sha256:}" >"$FAKE_DOCKER/local/$key"
  else
    echo "$3" >"$FAKE_DOCKER/remote/$key"
  fi
}

@test "pull-images.sh: pulls new and changed images, skips unchanged ones, prunes unlisted" {
  command -v jq >/dev/null || skip "jq not installed"
  make_fake_docker
  fake_image remote env/same:1 sha256:aaa
  fake_image local env/same:1 sha256:aaa
  fake_image remote env/changed:1 sha256:new
  fake_image local env/changed:1 sha256:old
  fake_image remote env/added:1 sha256:ccc
  fake_image local env/dropped:1 sha256:ddd
  run env PATH="$FAKE_DOCKER/bin:$PATH" PULL_PARALLELISM=2 bash -c \
    "source '$scripts/pull-images.sh' && pull_all env/same:1 env/changed:1 env/added:1 && prune_unlisted env/same:1 env/changed:1 env/added:1"
  [ "$status" -eq 0 ]
  [[ $output == *"unchanged: env/same:1"* ]]
  [[ $output == *"images: 2 pulled, 1 skipped, total 3"* ]]
  [ "$(sort "$FAKE_DOCKER/pulls" | tr '\n' ' ')" = "env/added:1 env/changed:1 " ]
  [ "$(cat "$FAKE_DOCKER/removed")" = "sha256:id-ddd" ]
}

@test "pull-images.sh: a failed pull fails the step" {
  make_fake_docker
  fake_image remote env/ok:1 sha256:aaa
  run env PATH="$FAKE_DOCKER/bin:$PATH" bash -c \
    "source '$scripts/pull-images.sh' && ct_retry() { shift 2; \"\$@\"; } && pull_all env/ok:1 env/missing:1"
  [ "$status" -ne 0 ]
  [[ $output == *"FAILED to pull: env/missing:1"* ]]
  [[ $output == *"1 image(s) failed to pull"* ]]
}
