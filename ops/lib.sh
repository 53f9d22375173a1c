#!/usr/bin/env bash
# Shared by the admin scripts in ops/: logging with timing, --dry-run, and the AWS CLI.
# Sourced, never run. See docs/access.md for what each script is for.
#
# - Logs go to stderr; in --dry-run the AWS commands go to stdout, one a line, quoted so
#   they can be pasted into a shell (values a real run would look up are <PLACEHOLDERS>).
# - AWS_ENDPOINT_URL (a moto server in tests) and AWS_REGION are passed as --endpoint-url
#   and --region, since AWS CLI v1 ignores both variables.
# shellcheck disable=SC2034  # OPS_* variables are read by the scripts that source this file

OPS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OPS_DRY_RUN=0
OPS_NAME="${0##*/}"

ops_log() {
  printf '%s [%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$OPS_NAME" "$*" >&2
}

ops_die() {
  ops_log "ERROR: $*"
  exit 1
}

# A bad command line: the message and a pointer to --help, exit status 2.
ops_usage_error() {
  printf '%s: %s (see %s --help)\n' "$OPS_NAME" "$*" "$OPS_NAME" >&2
  exit 2
}

# Run a function as a named step: "start", then "ok in Ns"; a failure ends the script
# (set -e; deliberately not `"$@" || ...`, which would turn set -e off inside the step)
# and the EXIT trap below logs which step failed.
OPS_CURRENT_STEP=""
ops_step() {
  local name=$1 start
  shift
  start=$(date +%s)
  OPS_CURRENT_STEP=$name
  ops_log "step $name: start"
  "$@"
  ops_log "step $name: ok in $(($(date +%s) - start))s"
  OPS_CURRENT_STEP=""
}

ops_on_exit() {
  local rc=$?
  if [[ $rc -ne 0 && -n $OPS_CURRENT_STEP ]]; then
    ops_log "step $OPS_CURRENT_STEP: FAILED (exit $rc)"
  fi
}
trap ops_on_exit EXIT

# One argument, shell-quoted only when it needs it (readable dry-run output).
ops_quote_arg() {
  local arg=$1
  if [[ $arg =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
    printf '%s' "$arg"
  else
    printf "'%s'" "${arg//\'/\'\\\'\'}"
  fi
}

ops_quote() {
  local arg sep=""
  for arg in "$@"; do
    printf '%s' "$sep"
    ops_quote_arg "$arg"
    sep=" "
  done
  printf '\n'
}

# AWS CLI v1 reads neither AWS_ENDPOINT_URL nor AWS_REGION: pass them as options.
ops_aws_argv() {
  OPS_ARGV=(aws)
  [[ -n ${AWS_ENDPOINT_URL:-} ]] && OPS_ARGV+=(--endpoint-url "$AWS_ENDPOINT_URL")
  [[ -n ${AWS_REGION:-} ]] && OPS_ARGV+=(--region "$AWS_REGION")
  OPS_ARGV+=("$@")
}

# A command that changes something: printed in --dry-run, else logged and run (its output
# dropped: use ops_query for answers).
ops_aws() {
  ops_aws_argv "$@"
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    ops_quote "${OPS_ARGV[@]}"
    return 0
  fi
  ops_log "+ $(ops_quote "${OPS_ARGV[@]}")"
  "${OPS_ARGV[@]}" >/dev/null
}

# A look-up whose answer later commands need: ops_query VAR PLACEHOLDER aws-args...
# Sets VAR to the command's output; in --dry-run prints the command and sets PLACEHOLDER.
ops_query() {
  local var=$1 placeholder=$2 out
  shift 2
  ops_aws_argv "$@"
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    ops_quote "${OPS_ARGV[@]}"
    printf -v "$var" '%s' "$placeholder"
    return 0
  fi
  ops_log "+ $(ops_quote "${OPS_ARGV[@]}")"
  out=$("${OPS_ARGV[@]}") || ops_die "failed: $(ops_quote "$@")"
  [[ $out == None ]] && out=""
  printf -v "$var" '%s' "$out"
}

# Does a resource exist? ops_exists aws-args... (a get/describe call). 0 yes, 1 no; any
# error other than "not found" stops the script. In --dry-run it prints the check and
# answers no, or yes when OPS_DRY_RUN_ASSUME_EXISTS=1 (set it for the call).
ops_exists() {
  local err
  ops_aws_argv "$@"
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    if [[ ${OPS_DRY_RUN_ASSUME_EXISTS:-0} -eq 1 ]]; then
      printf '# check: %s (dry run: assumed to exist)\n' "$(ops_quote "${OPS_ARGV[@]}")"
      return 0
    fi
    printf '# check: %s (dry run: assumed missing)\n' "$(ops_quote "${OPS_ARGV[@]}")"
    return 1
  fi
  if err=$("${OPS_ARGV[@]}" 2>&1 >/dev/null); then
    return 0
  fi
  if [[ $err =~ NoSuchEntity|NotFound|NoSuchBucket|ResourceNotFound|\(404\) ]]; then
    return 1
  fi
  ops_die "$(ops_quote "$@") failed: $err"
}

# A remark in the dry-run listing (not a command), e.g. what a real run decides on the spot.
ops_note() {
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    printf '# %s\n' "$*"
  else
    ops_log "$*"
  fi
}

# An absolute path to a policy file, checked: valid JSON, and within a size quota
# (characters without whitespace, as IAM counts them).
ops_policy_file() {
  local path=$1 limit=$2 size
  [[ $path == /* ]] || path="$PWD/$path"
  [[ -f $path ]] || ops_die "policy file $path not found"
  python3 -m json.tool "$path" >/dev/null 2>&1 || ops_die "policy file $path is not valid JSON"
  size=$(tr -d '[:space:]' <"$path" | wc -c)
  ((size <= limit)) || ops_die "policy file $path is $size characters (whitespace not counted), over IAM's $limit"
  printf '%s' "$path"
}

# The account the caller's credentials are in (a placeholder in --dry-run).
ops_account_id() {
  local var=$1
  ops_query "$var" "<ACCOUNT_ID>" sts get-caller-identity --query Account --output text
}

# Identity Center: OPS_INSTANCE_ARN and OPS_STORE_ID of the (only) instance. Extra
# arguments (e.g. --profile P) go to the calls.
ops_sso_instance() {
  ops_query OPS_INSTANCE_ARN "<INSTANCE_ARN>" "$@" sso-admin list-instances \
    --query 'Instances[0].InstanceArn' --output text
  [[ -n $OPS_INSTANCE_ARN ]] || ops_die "no IAM Identity Center instance visible to these credentials (use the org management account)"
  ops_query OPS_STORE_ID "<IDENTITY_STORE_ID>" "$@" sso-admin list-instances \
    --query 'Instances[0].IdentityStoreId' --output text
}

# The ARN of the permission set called NAME into VAR ("" if there is none):
# ops_find_permission_set VAR NAME [extra args]
ops_find_permission_set() {
  local var=$1 name=$2 arns arn found=""
  shift 2
  ops_query arns "<PERMISSION_SET_ARNS>" "$@" sso-admin list-permission-sets \
    --instance-arn "$OPS_INSTANCE_ARN" --query 'PermissionSets[]' --output text
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    printf -v "$var" '%s' "<PERMISSION_SET_ARN of $name>"
    return 0
  fi
  for arn in $arns; do
    local this
    ops_query this "" "$@" sso-admin describe-permission-set --instance-arn "$OPS_INSTANCE_ARN" \
      --permission-set-arn "$arn" --query 'PermissionSet.Name' --output text
    if [[ $this == "$name" ]]; then
      found=$arn
      break
    fi
  done
  printf -v "$var" '%s' "$found"
}

# The oldest non-default version of a managed policy when it has IAM's maximum of 5, so
# that create-policy-version can succeed: deletes it. ops_rotate_policy_versions ARN [extra]
ops_rotate_policy_versions() {
  local arn=$1 ids id oldest="" count
  shift
  ops_query ids "<NON_DEFAULT_VERSION_IDS>" "$@" iam list-policy-versions --policy-arn "$arn" \
    --query 'Versions[?!IsDefaultVersion].VersionId' --output text
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    ops_note "only when the policy already has 5 versions (IAM's maximum): delete the oldest non-default one"
    ops_aws "$@" iam delete-policy-version --policy-arn "$arn" --version-id "<OLDEST_NON_DEFAULT_VERSION>"
    return 0
  fi
  read -r -a ids <<<"$ids"
  count=$((${#ids[@]} + 1))
  if ((count < 5)); then
    ops_log "policy has $count version(s): no rotation needed"
    return 0
  fi
  for id in "${ids[@]}"; do
    # v1, v2, ... v12: the smallest number is the oldest
    if [[ -z $oldest ]] || ((${id#v} < ${oldest#v})); then
      oldest=$id
    fi
  done
  ops_log "policy has $count versions: deleting the oldest non-default, $oldest"
  ops_aws "$@" iam delete-policy-version --policy-arn "$arn" --version-id "$oldest"
}

# The common options: sets OPS_DRY_RUN, prints help. Unconsumed arguments come back in OPS_ARGS.
ops_parse_common() {
  local usage=$1
  shift
  OPS_ARGS=()
  while (($#)); do
    case $1 in
      --dry-run) OPS_DRY_RUN=1 ;;
      -h | --help)
        printf '%s\n' "$usage"
        exit 0
        ;;
      *) OPS_ARGS+=("$1") ;;
    esac
    shift
  done
}
