#!/usr/bin/env bash
# Pull the environment Docker images listed in IMAGES_FILE (default images.txt beside
# this script). An image already on the machine whose registry digest is unchanged is
# skipped, so an incremental build pulls only what changed. Images no longer listed are
# removed, and so are the dangling layers of replaced versions; LOCAL_IMAGES (the ones
# build-images.sh makes on the builder, space-separated) are kept, never pulled. Private images: when the
# instance can read DOCKER_ORG_NAME_PARAM / DOCKER_ORG_PAT_PARAM from SSM, it logs in to
# DOCKER_REGISTRY (default Docker Hub) for the pulls and logs out again (no credential
# stays in the AMI). Only the registry and user name are logged, never the PAT.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=packer/scripts/lib.sh
source "$here/lib.sh"

RECORD_DIR="${CT_AMI_RECORD_DIR:-/etc/ct-fleet-ami}"

# read_images FILE: one image reference per line; '#' starts a comment.
read_images() {
  local file=$1
  awk '{ sub(/#.*/, "") }
       NF > 1 { printf "%s:%d: one image per line, got: %s\n", FILENAME, NR, $0 > "/dev/stderr"; bad = 1 }
       NF == 1 && !seen[$1]++ { print $1 }
       END { exit bad }' "$file"
}

ssm_value() {
  local name=$1
  aws ${AWS_ENDPOINT_URL:+--endpoint-url "$AWS_ENDPOINT_URL"} ssm get-parameter --name "$name" \
    --with-decryption --query Parameter.Value --output text
}

# Where `docker login` writes: DOCKER_CONFIG, else ~/.docker.
docker_config_file() {
  echo "${DOCKER_CONFIG:-$HOME/.docker}/config.json"
}

docker_login() {
  local name_param=${DOCKER_ORG_NAME_PARAM:-} pat_param=${DOCKER_ORG_PAT_PARAM:-} name pat
  if [[ -z $name_param || -z $pat_param ]] || ! command -v aws >/dev/null 2>&1; then
    ct_log "no Docker registry auth configured: pulling anonymously"
    return 0
  fi
  if ! name=$(ssm_value "$name_param" 2>/dev/null) || ! pat=$(ssm_value "$pat_param" 2>/dev/null); then
    ct_log "cannot read $name_param / $pat_param from SSM (no instance profile or no parameter): pulling anonymously"
    return 0
  fi
  local registry=${DOCKER_REGISTRY:-Docker Hub} err
  # The PAT goes on stdin only; docker's own output (a warning naming the config file,
  # "Login Succeeded") is kept out of the log, and its error is reduced to one line.
  if ! err=$(printf '%s' "$pat" | docker login ${DOCKER_REGISTRY:+"$DOCKER_REGISTRY"} --username "$name" --password-stdin 2>&1 >/dev/null); then
    err=$(printf '%s\n' "${err//"$pat"/<PAT>}" | grep -v '^WARNING' | tail -n1)
    ct_log "docker login to $registry as $name FAILED: $err"
    return 1
  fi
  ct_log "logged in to $registry as $name"
}

docker_logout() {
  docker logout ${DOCKER_REGISTRY:+"$DOCKER_REGISTRY"} >/dev/null 2>&1 || true
  rm -f "$(docker_config_file)"
}

# remote_digest IMAGE: the registry's digest for the reference (index or manifest).
remote_digest() {
  local image=$1
  docker buildx imagetools inspect --format '{{json .Manifest}}' "$image" 2>/dev/null | jq -r '.digest // empty'
}

# local_digests IMAGE: digests the local copy was pulled by.
local_digests() {
  local image=$1
  docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$image" 2>/dev/null | sed -n 's/.*@//p'
}

# pull_one IMAGE STATUS_FILE: pull unless unchanged; write pulled|skipped|failed.
pull_one() {
  local image=$1 status_file=$2 remote start=$SECONDS
  if docker image inspect "$image" >/dev/null 2>&1; then
    if [[ $image == *@sha256:* ]]; then
      ct_log "unchanged (pinned by digest): $image"
      echo skipped >"$status_file"
      return 0
    fi
    remote=$(remote_digest "$image" || true)
    if [[ -n $remote ]] && local_digests "$image" | grep -qxF "$remote"; then
      ct_log "unchanged: $image ($remote)"
      echo skipped >"$status_file"
      return 0
    fi
  fi
  if ct_retry 3 15 docker pull --quiet "$image" >/dev/null; then
    ct_log "pulled: $image in $((SECONDS - start))s"
    echo pulled >"$status_file"
  else
    ct_log "FAILED to pull: $image"
    echo failed >"$status_file"
    return 1
  fi
}

# pull_all IMAGE...: PULL_PARALLELISM pulls at a time; fails if any pull failed.
# What each pull did is read from its status file, not from `wait -n`: a pull that ended
# before `wait -n` was called may be reported as "no child" (127), which is not a failure,
# and a pull killed before writing its status is one.
pull_all() {
  local parallel=${PULL_PARALLELISM:-4} status image running=0 failed i=0
  status=$(mktemp -d)
  for image in "$@"; do
    if ((running >= parallel)); then
      wait -n || true
      running=$((running - 1))
    fi
    pull_one "$image" "$status/$i" &
    running=$((running + 1))
    i=$((i + 1))
  done
  wait
  ct_log "images: $(cat "$status"/* 2>/dev/null | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}')total $#"
  failed=$(($# - $(cat "$status"/* 2>/dev/null | grep -cxE 'pulled|skipped' || true)))
  rm -rf "$status"
  if ((failed > 0)); then
    ct_log "ERROR: $failed image(s) failed to pull"
    return 1
  fi
}

# prune_unlisted IMAGE...: remove every image that is not one of the listed ones.
prune_unlisted() {
  local image id
  local -A keep=()
  for image in "$@"; do
    # A local image not built yet (a fresh build) has nothing to keep.
    id=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null) || continue
    keep[$id]=1
  done
  while IFS= read -r id; do
    if [[ -z ${keep[$id]:-} ]]; then
      ct_log "removing unlisted image $id"
      docker image rm --force "$id" >/dev/null || ct_log "could not remove $id"
    fi
  done < <(docker image ls --quiet --no-trunc | sort -u)
  docker image prune --force >/dev/null
}

record_images() {
  local image
  install -m 0755 -d "$RECORD_DIR"
  for image in "$@"; do
    printf '%s\t%s\n' "$image" "$(docker image inspect --format '{{.Id}}' "$image")"
  done >"$RECORD_DIR/images.tsv"
}

pull_images() {
  local file=${IMAGES_FILE:-$here/images.txt}
  local -a images
  [[ -f $file ]] || ct_die "no image list at $file"
  mapfile -t images < <(read_images "$file")
  if ((${#images[@]} == 0)); then
    ct_log "no images listed in $file: the AMI will carry none"
  fi
  docker info >/dev/null 2>&1 || systemctl start docker
  ct_at_exit docker_logout
  docker_login || return 1
  if ((${#images[@]} > 0)); then
    pull_all "${images[@]}" || return 1
  fi
  docker_logout
  # shellcheck disable=SC2086 # LOCAL_IMAGES is a space-separated list of references
  prune_unlisted "${images[@]}" ${LOCAL_IMAGES:-}
  record_images "${images[@]}"
  ct_log "disk after pulls: $(df -h --output=used,avail / | tail -n1 | awk '{print $1 " used, " $2 " free"}')"
}

main() {
  ct_require_root
  ct_step pull-images pull_images
}

# Sourcing (tests) defines the functions without running anything.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
