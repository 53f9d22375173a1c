#!/usr/bin/env bash
# ct.sh: the one bash helper library of ct-fleet. Sourced, never run: by worker/lib.sh,
# packer/scripts/lib.sh, ops/lib.sh and bin/lib.sh, the small area files that add their
# own paths and helpers. Every function here and in the area files is named ct_*. It ships
# in the code artifact (git archive) and in every worker's user-data (the boot kit, under
# EC2's 16 KB: what one area alone needs goes in its area file). Packer stages it on the
# AMI builder at the same path relative to packer/scripts/, so `../../lib/bash/ct.sh`
# finds it from either place.
#
# Log lines, on stderr: "<UTC time> [<tag>] <message>", time as 2024-05-01T09:00:01Z, tag
# CT_TAG when set, else the script's name. Step lines (ct_step) are log lines whose
# message is one of
#   step <name>: start
#   step <name>: ok in <seconds>s
#   step <name>: FAILED (exit <status>) after <seconds>s
# and ct_die's is "ERROR: <message>". lib/ct_fleet/protocol/steplog.py is their one parser
# (the AMI build's step timings, the controller's reason for workers that keep dying):
# change the format there and here together.
# shellcheck disable=SC2034  # CT_* variables are read by the scripts that source this file

# Open steps, innermost last: name, tag and start time of each.
CT_STEP_NAMES=()
CT_STEP_TAGS=()
CT_STEP_STARTS=()
# Functions to run at exit (ct_at_exit), and the status the script exits with.
CT_EXIT_HANDLERS=()
CT_EXIT_STATUS=0
# Temp files and directories (ct_mktemp) removed at exit.
CT_TEMPS=()

# The time and the tag without a subshell or a `date`: scripts log every step, and two
# processes per line were over a quarter of the processes a local fleet test started.
ct_log() {
  local now
  TZ=UTC0 printf -v now '%(%Y-%m-%dT%H:%M:%SZ)T' -1
  printf '%s [%s] %s\n' "$now" "${CT_TAG:-${0##*/}}" "$*" >&2
}

ct_die() {
  ct_log "ERROR: $*"
  exit 1
}

# A bad command line: the message and a pointer to --help, exit status 2.
ct_usage_error() {
  printf '%s: %s (see %s --help)\n' "${0##*/}" "$*" "${0##*/}" >&2
  exit 2
}

# ct_step NAME COMMAND [ARGS...]: run COMMAND as a named, timed step. Call it as a plain
# command: set -e then stops the step at its first failing command, and the EXIT handler
# below logs the FAILED line of every open step (innermost first) before the script ends.
# Under `if`/`||` bash switches set -e off inside the step; the FAILED line is logged
# all the same and the status returned.
ct_step() {
  local name=$1 rc
  shift
  [[ $name =~ ^[^[:space:]:]+$ ]] || ct_die "ct_step: a step name has no spaces or colons, got '$name'"
  ct_log "step $name: start"
  CT_STEP_NAMES+=("$name")
  CT_STEP_TAGS+=("${CT_TAG:-${0##*/}}")
  CT_STEP_STARTS+=("$SECONDS")
  "$@"
  rc=$?
  ct_step_end "$rc"
  return "$rc"
}

# Close the innermost open step with status RC.
ct_step_end() {
  local rc=$1 i=$((${#CT_STEP_NAMES[@]} - 1)) name tag elapsed
  ((i >= 0)) || return 0
  name=${CT_STEP_NAMES[i]} tag=${CT_STEP_TAGS[i]}
  elapsed=$((SECONDS - CT_STEP_STARTS[i]))
  unset 'CT_STEP_NAMES[i]' 'CT_STEP_TAGS[i]' 'CT_STEP_STARTS[i]'
  if ((rc == 0)); then
    CT_TAG=$tag ct_log "step $name: ok in ${elapsed}s"
  else
    CT_TAG=$tag ct_log "step $name: FAILED (exit $rc) after ${elapsed}s"
  fi
}

# ct_at_exit FUNCTION: run FUNCTION when the script exits (after the FAILED lines of open
# steps), with CT_EXIT_STATUS set. The library owns the EXIT trap: scripts add handlers
# here instead of setting their own trap, which would replace it.
ct_at_exit() {
  CT_EXIT_HANDLERS+=("$1")
}

# ct_mktemp VAR [mktemp options, e.g. -d]: make a temp file (or directory) and set VAR to
# its path; it is removed when the script exits, however it exits (a failed command under
# set -e, a signal), so a failing step leaves nothing in $TMPDIR. Not $(...): a subshell
# could not register it.
ct_mktemp() {
  local -n ct_mktemp_out=$1
  shift
  ct_mktemp_out=$(mktemp "$@")
  CT_TEMPS+=("$ct_mktemp_out")
}

ct_on_exit() {
  CT_EXIT_STATUS=$?
  local handler
  while ((${#CT_STEP_NAMES[@]})); do
    ct_step_end "$CT_EXIT_STATUS"
  done
  for handler in "${CT_EXIT_HANDLERS[@]+"${CT_EXIT_HANDLERS[@]}"}"; do
    "$handler" || true
  done
  ((${#CT_TEMPS[@]} == 0)) || rm -rf -- "${CT_TEMPS[@]}" || true
  return "$CT_EXIT_STATUS"
}
trap ct_on_exit EXIT

# The AWS CLI command line for ARGS, in CT_AWS_ARGV. AWS CLI v1 reads neither
# AWS_ENDPOINT_URL (a moto server: the embedded cloud, tests) nor AWS_REGION, so both go
# on the command line; v2 takes the options as well.
ct_aws_argv() {
  CT_AWS_ARGV=(aws)
  [[ -n ${AWS_ENDPOINT_URL:-} ]] && CT_AWS_ARGV+=(--endpoint-url "$AWS_ENDPOINT_URL")
  [[ -n ${AWS_REGION:-} ]] && CT_AWS_ARGV+=(--region "$AWS_REGION")
  CT_AWS_ARGV+=("$@")
}

ct_aws() {
  ct_aws_argv "$@"
  "${CT_AWS_ARGV[@]}"
}

# ct_retry ATTEMPTS DELAY COMMAND [ARGS...]: for network calls that fail transiently.
ct_retry() {
  local attempts=$1 delay=$2 n=1
  shift 2
  until "$@"; do
    if ((n >= attempts)); then
      ct_log "giving up after $n attempts: $*"
      return 1
    fi
    ct_log "attempt $n/$attempts failed, retrying in ${delay}s: $*"
    sleep "$delay"
    n=$((n + 1))
  done
}

# ct_apt_get ARGS...: non-interactive apt-get that waits for a running apt (cloud-init,
# unattended-upgrades) instead of failing on the dpkg lock.
ct_apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -y -q \
    -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confold "$@"
}

# ct_arch_name: x86_64 or aarch64, as AWS CLI and uv downloads name them.
ct_arch_name() {
  local machine
  machine=$(uname -m)
  case $machine in
    x86_64 | amd64) echo x86_64 ;;
    aarch64 | arm64) echo aarch64 ;;
    *) ct_die "unsupported architecture $machine" ;;
  esac
}

# ct_install_aws_cli [BIN_DIR] [INSTALL_DIR]: AWS CLI v2 from AWS's bundle (Ubuntu's
# awscli is v1), as root; a rerun updates it in place. Here and not in an area file: the
# AMI build and the user-data of a stock image both install it, and only this file
# reaches both. curl and unzip come first when missing (stock Ubuntu lacks unzip).
ct_install_aws_cli() {
  local bin_dir=${1:-/usr/local/bin} install_dir=${2:-/usr/local/aws-cli} tool work
  local -a missing=()
  for tool in curl unzip; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    ct_retry 3 10 ct_apt_get update >/dev/null
    ct_retry 3 10 ct_apt_get install --no-install-recommends "${missing[@]}" >/dev/null
  fi
  work=$(mktemp -d)
  ct_retry 3 10 curl -fsSL -o "$work/awscliv2.zip" \
    "https://awscli.amazonaws.com/awscli-exe-linux-$(ct_arch_name).zip"
  unzip -q "$work/awscliv2.zip" -d "$work"
  "$work/aws/install" --update --bin-dir "$bin_dir" --install-dir "$install_dir"
  rm -rf "$work"
  ct_log "$("$bin_dir/aws" --version)"
}

# ct_require NAME...: stop unless every named variable is set and not empty;
# CT_REQUIRE_HINT (optional) says where the setting should have come from.
ct_require() {
  local name
  for name in "$@"; do
    [[ -n ${!name:-} ]] || ct_die "$name is not set${CT_REQUIRE_HINT:+ ($CT_REQUIRE_HINT)}"
  done
}

# ct_tee_log FILE: from here on, this script's output (and its children's) also goes to
# FILE. Once per process tree: a script started under it (user-data starts bootstrap) sees
# CT_LOG_FILE and does not tee a second time.
ct_tee_log() {
  local file=$1
  [[ ${CT_LOG_FILE:-} == "$file" ]] && return 0
  mkdir -p "$(dirname "$file")"
  exec > >(tee -a "$file") 2>&1
  export CT_LOG_FILE=$file
}
