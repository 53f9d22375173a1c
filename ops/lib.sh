#!/usr/bin/env bash
# The admin scripts' area file of lib/bash/ct.sh (sourced, never run): --dry-run and the
# AWS CLI calls of ops/. See docs/access.md for what each script is for.
#
# - Logs go to stderr; in --dry-run the AWS commands go to stdout, one a line, quoted so
#   they can be pasted into a shell (values a real run would look up are <PLACEHOLDERS>).
# - A failing step ends the script (set -e, ct_step), its FAILED line logged on the way out.
# shellcheck disable=SC2034  # OPS_* variables are read by the scripts that source this file

OPS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/bash/ct.sh
source "$OPS_ROOT/lib/bash/ct.sh"
OPS_DRY_RUN=0

# One argument, shell-quoted only when it needs it (readable dry-run output).
ct_ops_quote_arg() {
  local arg=$1
  if [[ $arg =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
    printf '%s' "$arg"
  else
    printf "'%s'" "${arg//\'/\'\\\'\'}"
  fi
}

ct_ops_quote() {
  local arg sep=""
  for arg in "$@"; do
    printf '%s' "$sep"
    ct_ops_quote_arg "$arg"
    sep=" "
  done
  printf '\n'
}

# A command that changes something: printed in --dry-run, else logged and run (its output
# dropped: use ct_ops_query for answers).
ct_ops_aws() {
  ct_aws_argv "$@"
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    ct_ops_quote "${CT_AWS_ARGV[@]}"
    return 0
  fi
  ct_log "+ $(ct_ops_quote "${CT_AWS_ARGV[@]}")"
  "${CT_AWS_ARGV[@]}" >/dev/null
}

# A look-up whose answer later commands need: ct_ops_query VAR PLACEHOLDER aws-args...
# Sets VAR to the command's output; in --dry-run prints the command and sets PLACEHOLDER.
ct_ops_query() {
  local var=$1 placeholder=$2 out
  shift 2
  ct_aws_argv "$@"
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    ct_ops_quote "${CT_AWS_ARGV[@]}"
    printf -v "$var" '%s' "$placeholder"
    return 0
  fi
  ct_log "+ $(ct_ops_quote "${CT_AWS_ARGV[@]}")"
  out=$("${CT_AWS_ARGV[@]}") || ct_die "failed: $(ct_ops_quote "$@")"
  [[ $out == None ]] && out=""
  printf -v "$var" '%s' "$out"
}

# Does a resource exist? ct_ops_exists aws-args... (a get/describe call). 0 yes, 1 no; any
# error other than "not found" stops the script. In --dry-run it prints the check and
# answers no, or yes when OPS_DRY_RUN_ASSUME_EXISTS=1 (set it for the call).
ct_ops_exists() {
  local err
  ct_aws_argv "$@"
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    if [[ ${OPS_DRY_RUN_ASSUME_EXISTS:-0} -eq 1 ]]; then
      printf '# check: %s (dry run: assumed to exist)\n' "$(ct_ops_quote "${CT_AWS_ARGV[@]}")"
      return 0
    fi
    printf '# check: %s (dry run: assumed missing)\n' "$(ct_ops_quote "${CT_AWS_ARGV[@]}")"
    return 1
  fi
  if err=$("${CT_AWS_ARGV[@]}" 2>&1 >/dev/null); then
    return 0
  fi
  if [[ $err =~ NoSuchEntity|NotFound|NoSuchBucket|ResourceNotFound|\(404\) ]]; then
    return 1
  fi
  ct_die "$(ct_ops_quote "$@") failed: $err"
}

# A remark in the dry-run listing (not a command), e.g. what a real run decides on the spot.
ct_ops_note() {
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    printf '# %s\n' "$*"
  else
    ct_log "$*"
  fi
}

# An absolute path to a policy file, checked: valid JSON, and within a size quota
# (characters without whitespace, as IAM counts them).
ct_ops_policy_file() {
  local path=$1 limit=$2 size
  [[ $path == /* ]] || path="$PWD/$path"
  [[ -f $path ]] || ct_die "policy file $path not found"
  python3 -m json.tool "$path" >/dev/null 2>&1 || ct_die "policy file $path is not valid JSON"
  size=$(tr -d '[:space:]' <"$path" | wc -c)
  ((size <= limit)) || ct_die "policy file $path is $size characters (whitespace not counted), over IAM's $limit"
  printf '%s' "$path"
}

# The account the caller's credentials are in (a placeholder in --dry-run).
ct_ops_account_id() {
  local var=$1
  ct_ops_query "$var" "<ACCOUNT_ID>" sts get-caller-identity --query Account --output text
}

# Identity Center: OPS_INSTANCE_ARN and OPS_STORE_ID of the (only) instance. Extra
# arguments (e.g. --profile P) go to the calls.
ct_ops_sso_instance() {
  ct_ops_query OPS_INSTANCE_ARN "<INSTANCE_ARN>" "$@" sso-admin list-instances \
    --query 'Instances[0].InstanceArn' --output text
  [[ -n $OPS_INSTANCE_ARN ]] || ct_die "no IAM Identity Center instance visible to these credentials (use the org management account)"
  ct_ops_query OPS_STORE_ID "<IDENTITY_STORE_ID>" "$@" sso-admin list-instances \
    --query 'Instances[0].IdentityStoreId' --output text
}

# The ARN of the permission set called NAME into VAR ("" if there is none):
# ct_ops_find_permission_set VAR NAME [extra args]
ct_ops_find_permission_set() {
  local var=$1 name=$2 arns arn found=""
  shift 2
  ct_ops_query arns "<PERMISSION_SET_ARNS>" "$@" sso-admin list-permission-sets \
    --instance-arn "$OPS_INSTANCE_ARN" --query 'PermissionSets[]' --output text
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    printf -v "$var" '%s' "<PERMISSION_SET_ARN of $name>"
    return 0
  fi
  for arn in $arns; do
    local this
    ct_ops_query this "" "$@" sso-admin describe-permission-set --instance-arn "$OPS_INSTANCE_ARN" \
      --permission-set-arn "$arn" --query 'PermissionSet.Name' --output text
    if [[ $this == "$name" ]]; then
      found=$arn
      break
    fi
  done
  printf -v "$var" '%s' "$found"
}

# The oldest non-default version of a managed policy when it has IAM's maximum of 5, so
# that create-policy-version can succeed: deletes it. ct_ops_rotate_policy_versions ARN [extra]
ct_ops_rotate_policy_versions() {
  local arn=$1 ids id oldest="" count
  shift
  ct_ops_query ids "<NON_DEFAULT_VERSION_IDS>" "$@" iam list-policy-versions --policy-arn "$arn" \
    --query 'Versions[?!IsDefaultVersion].VersionId' --output text
  if [[ $OPS_DRY_RUN -eq 1 ]]; then
    ct_ops_note "only when the policy already has 5 versions (IAM's maximum): delete the oldest non-default one"
    ct_ops_aws "$@" iam delete-policy-version --policy-arn "$arn" --version-id "<OLDEST_NON_DEFAULT_VERSION>"
    return 0
  fi
  read -r -a ids <<<"$ids"
  count=$((${#ids[@]} + 1))
  if ((count < 5)); then
    ct_log "policy has $count version(s): no rotation needed"
    return 0
  fi
  for id in "${ids[@]}"; do
    # v1, v2, ... v12: the smallest number is the oldest
    if [[ -z $oldest ]] || ((${id#v} < ${oldest#v})); then
      oldest=$id
    fi
  done
  ct_log "policy has $count versions: deleting the oldest non-default, $oldest"
  ct_ops_aws "$@" iam delete-policy-version --policy-arn "$arn" --version-id "$oldest"
}

# The common options: sets OPS_DRY_RUN, prints help. Unconsumed arguments come back in OPS_ARGS.
ct_ops_parse_common() {
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
