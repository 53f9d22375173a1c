#!/usr/bin/env bats
# The admin scripts in ops/: each --dry-run prints the AWS CLI commands it would run (and
# runs none: the endpoint is a dead port), and create-infra, propagate-policy,
# grant-key-access and grant-sso-access run for real against a moto server.
# (grant-sso-access --setup is dry-run only: moto has no ABAC attribute configuration.)

bats_require_minimum_version 1.5.0
load helpers

OPS="$REPO_ROOT/ops"
OPERATOR_POLICY="$REPO_ROOT/policies/fleet-iam-policy.json"
WORKER_POLICY="$REPO_ROOT/policies/fleet-worker-iam-policy.json"
MOTO_ACCOUNT=123456789012
FLEET_ACCOUNT=326120904690

setup_file() {
  start_moto
}
teardown_file() { stop_moto; }

setup() {
  aws_test_env
  export AWS_ENDPOINT_URL="$MOTO_URL"
  unset FLEET_ACCOUNT_ID
}

# Dry runs talk to nothing: point the CLI at a port where nothing listens.
dry() {
  AWS_ENDPOINT_URL=http://127.0.0.1:9 run --separate-stderr "$OPS/$1" --dry-run "${@:2}"
}

# json_equal FILE JSON: same document (key order and whitespace aside).
json_equal() {
  python -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])) != json.loads(sys.argv[2]))' "$1" "$2"
}

@test "every admin script has --help and rejects unknown options with status 2" {
  local script
  for script in create-infra grant-sso-access grant-key-access propagate-policy; do
    run "$OPS/$script" --help
    [ "$status" -eq 0 ]
    assert_contains "$output" "usage: ops/$script"
    assert_contains "$output" "--dry-run"
    run "$OPS/$script" --no-such-option
    [ "$status" -eq 2 ]
    assert_contains "$output" "--help"
  done
}

@test "create-infra --dry-run prints the bucket, role, policy and instance profile commands" {
  dry create-infra
  [ "$status" -eq 0 ] || { echo "$output $stderr"; false; }
  assert_in_order "$output" \
    "aws --endpoint-url http://127.0.0.1:9 --region us-east-1 s3api create-bucket --bucket lb-fleet-results-migrated" \
    "s3api put-public-access-block --bucket lb-fleet-results-migrated" \
    "iam create-role --role-name linuxbench-worker" \
    "--assume-role-policy-document file://$REPO_ROOT/policies/worker-trust-policy.json" \
    "iam put-role-policy --role-name linuxbench-worker --policy-name linuxbench-fleet-worker --policy-document file://$WORKER_POLICY" \
    "iam create-instance-profile --instance-profile-name linuxbench-worker" \
    "iam add-role-to-instance-profile --instance-profile-name linuxbench-worker --role-name linuxbench-worker"
  assert_contains "$stderr" "step worker-role: ok"
}

@test "create-infra --dry-run outside us-east-1 sets the bucket's location" {
  dry create-infra --region eu-west-1 --bucket my-results --role my-worker
  [ "$status" -eq 0 ]
  assert_contains "$output" "--region eu-west-1 s3api create-bucket --bucket my-results --create-bucket-configuration LocationConstraint=eu-west-1"
  assert_contains "$output" "iam create-instance-profile --instance-profile-name my-worker"
}

@test "grant-sso-access --dry-run --setup prints ABAC, permission set, inline policy and one assignment per user" {
  dry grant-sso-access --setup --account-id "$FLEET_ACCOUNT" alice bob
  [ "$status" -eq 0 ] || { echo "$output $stderr"; false; }
  assert_in_order "$output" \
    "sso-admin list-instances" \
    "sso-admin create-instance-access-control-attribute-configuration" \
    '"Key":"LaunchedBy","Value":{"Source":["${path:userName}"]}' \
    "sso-admin create-permission-set --instance-arn '<INSTANCE_ARN>' --name LinuxbenchFleet --session-duration PT12H" \
    "sso-admin put-inline-policy-to-permission-set --instance-arn '<INSTANCE_ARN>' --permission-set-arn '<PS_ARN>' --inline-policy file://$OPERATOR_POLICY" \
    "identitystore list-users --identity-store-id '<IDENTITY_STORE_ID>' --filters AttributePath=UserName,AttributeValue=alice" \
    "sso-admin create-account-assignment --instance-arn '<INSTANCE_ARN>' --target-id $FLEET_ACCOUNT --target-type AWS_ACCOUNT --permission-set-arn '<PS_ARN>' --principal-type USER --principal-id '<USER_ID of alice>'" \
    "AttributeValue=bob" \
    "--principal-id '<USER_ID of bob>'"
}

@test "grant-sso-access needs work to do, and an account to assign users to" {
  run "$OPS/grant-sso-access"
  [ "$status" -eq 2 ]
  assert_contains "$output" "nothing to do"
  run "$OPS/grant-sso-access" alice
  [ "$status" -eq 2 ]
  assert_contains "$output" "--account-id"
}

@test "grant-key-access --dry-run prints user, managed policy attachment and access key" {
  dry grant-key-access alice
  [ "$status" -eq 0 ] || { echo "$output $stderr"; false; }
  assert_in_order "$output" \
    "sts get-caller-identity" \
    "iam get-policy --policy-arn 'arn:aws:iam::<ACCOUNT_ID>:policy/linuxbench-fleet-access'" \
    "iam create-user --user-name alice" \
    "iam attach-user-policy --user-name alice --policy-arn 'arn:aws:iam::<ACCOUNT_ID>:policy/linuxbench-fleet-access'" \
    "iam create-access-key --user-name alice"
  refute_contains "$output" "AWS_SECRET_ACCESS_KEY="
}

@test "propagate-policy --dry-run prints SSO put + provision, then version rotation and the new default" {
  dry propagate-policy --account-id "$FLEET_ACCOUNT"
  [ "$status" -eq 0 ] || { echo "$output $stderr"; false; }
  local arn="arn:aws:iam::$FLEET_ACCOUNT:policy/linuxbench-fleet-access"
  assert_in_order "$output" \
    "sso-admin put-inline-policy-to-permission-set" "--inline-policy file://$OPERATOR_POLICY" \
    "sso-admin provision-permission-set" "--target-type ALL_PROVISIONED_ACCOUNTS" \
    "iam list-policy-versions --policy-arn $arn" \
    "iam delete-policy-version --policy-arn $arn --version-id '<OLDEST_NON_DEFAULT_VERSION>'" \
    "iam create-policy-version --policy-arn $arn --policy-document file://$OPERATOR_POLICY --set-as-default"
}

@test "propagate-policy refuses a policy over the managed-policy size" {
  local big="$BATS_TEST_TMPDIR/big.json"
  python - "$big" <<'EOF'
import json, sys
stmt = [{"Sid": f"S{i}", "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::bucket-{i:04d}/*"} for i in range(120)]
json.dump({"Version": "2012-10-17", "Statement": stmt}, open(sys.argv[1], "w"))
EOF
  dry propagate-policy --policy-file "$big"
  [ "$status" -eq 1 ]
  assert_contains "$stderr" "over IAM's 6144"
}

@test "create-infra creates bucket, role with inline policy and EC2 trust, and the instance profile" {
  run "$OPS/create-infra"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  awsm s3api head-bucket --bucket lb-fleet-results-migrated
  run awsm iam get-role --role-name linuxbench-worker --query 'Role.AssumeRolePolicyDocument.Statement[0].Principal.Service' --output text
  [ "$output" = "ec2.amazonaws.com" ]
  awsm iam get-role-policy --role-name linuxbench-worker --policy-name linuxbench-fleet-worker \
    --query PolicyDocument --output json >"$BATS_TEST_TMPDIR/put.json"
  json_equal "$BATS_TEST_TMPDIR/put.json" "$(cat "$WORKER_POLICY")"
  run awsm iam get-instance-profile --instance-profile-name linuxbench-worker --query 'InstanceProfile.Roles[].RoleName' --output text
  [ "$output" = "linuxbench-worker" ]
  run awsm s3api get-public-access-block --bucket lb-fleet-results-migrated \
    --query 'PublicAccessBlockConfiguration.BlockPublicPolicy' --output text
  [ "$output" = "True" ]

  # a rerun keeps everything and succeeds
  run "$OPS/create-infra"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  assert_contains "$output" "role linuxbench-worker exists"
  assert_contains "$output" "instance profile linuxbench-worker exists"
  refute_contains "$output" "create-role"
}

@test "propagate-policy with 5 versions deletes the oldest non-default and makes the new one default" {
  local arn="arn:aws:iam::$MOTO_ACCOUNT:policy/linuxbench-fleet-access" v versions
  awsm iam create-policy --policy-name linuxbench-fleet-access --policy-document "file://$WORKER_POLICY" >/dev/null
  for v in 2 3 4 5; do
    awsm iam create-policy-version --policy-arn "$arn" --policy-document "file://$WORKER_POLICY" >/dev/null
  done
  # v2 is the default: the oldest NON-default version is v1
  awsm iam set-default-policy-version --policy-arn "$arn" --version-id v2
  local instance
  instance=$(awsm sso-admin list-instances --query 'Instances[0].InstanceArn' --output text)
  awsm sso-admin create-permission-set --instance-arn "$instance" --name LinuxbenchFleet >/dev/null

  run "$OPS/propagate-policy"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  assert_contains "$output" "deleting the oldest non-default, v1"

  versions=$(awsm iam list-policy-versions --policy-arn "$arn" --query 'Versions[].VersionId' --output text | tr '\t' '\n' | sort -V | xargs)
  assert_equal "$versions" "v2 v3 v4 v5 v6"
  run awsm iam get-policy --policy-arn "$arn" --query Policy.DefaultVersionId --output text
  [ "$output" = "v6" ]
  awsm iam get-policy-version --policy-arn "$arn" --version-id v6 --query PolicyVersion.Document --output json >"$BATS_TEST_TMPDIR/v6.json"
  json_equal "$BATS_TEST_TMPDIR/v6.json" "$(cat "$OPERATOR_POLICY")"

  local ps
  ps=$(awsm sso-admin list-permission-sets --instance-arn "$instance" --query 'PermissionSets[0]' --output text)
  awsm sso-admin get-inline-policy-for-permission-set --instance-arn "$instance" --permission-set-arn "$ps" \
    --query InlinePolicy --output text >"$BATS_TEST_TMPDIR/inline.json"
  json_equal "$BATS_TEST_TMPDIR/inline.json" "$(cat "$OPERATOR_POLICY")"

  # a second propagation rotates again: now v2 is the oldest non-default
  run "$OPS/propagate-policy" --no-sso
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  assert_contains "$output" "deleting the oldest non-default, v2"
  versions=$(awsm iam list-policy-versions --policy-arn "$arn" --query 'Versions[].VersionId' --output text | tr '\t' '\n' | sort -V | xargs)
  assert_equal "$versions" "v3 v4 v5 v6 v7"
}

@test "propagate-policy below 5 versions deletes nothing; a missing policy is created" {
  local arn="arn:aws:iam::$MOTO_ACCOUNT:policy/bats-few-versions"
  awsm iam create-policy --policy-name bats-few-versions --policy-document "file://$WORKER_POLICY" >/dev/null
  run "$OPS/propagate-policy" --no-sso --policy-name bats-few-versions
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  refute_contains "$output" "delete-policy-version"
  run awsm iam get-policy --policy-arn "$arn" --query Policy.DefaultVersionId --output text
  [ "$output" = "v2" ]

  run "$OPS/propagate-policy" --no-sso --policy-name bats-new-policy
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  assert_contains "$output" "iam create-policy --policy-name bats-new-policy"
  awsm iam get-policy --policy-arn "arn:aws:iam::$MOTO_ACCOUNT:policy/bats-new-policy" >/dev/null
}

@test "grant-key-access creates the user, attaches the managed policy and prints a key pair" {
  run --separate-stderr "$OPS/grant-key-access" --policy-name bats-fleet-access dana
  [ "$status" -eq 0 ] || { echo "$output $stderr"; false; }
  assert_contains "$output" "AWS_ACCESS_KEY_ID="
  assert_contains "$output" "AWS_SECRET_ACCESS_KEY="
  run awsm iam list-attached-user-policies --user-name dana --query 'AttachedPolicies[].PolicyName' --output text
  [ "$output" = "bats-fleet-access" ]
  # the managed policy was created from the operator policy
  awsm iam get-policy-version --policy-arn "arn:aws:iam::$MOTO_ACCOUNT:policy/bats-fleet-access" --version-id v1 \
    --query PolicyVersion.Document --output json >"$BATS_TEST_TMPDIR/p.json"
  json_equal "$BATS_TEST_TMPDIR/p.json" "$(cat "$OPERATOR_POLICY")"

  # a second key is fine, a third is IAM's limit
  run "$OPS/grant-key-access" --policy-name bats-fleet-access dana
  [ "$status" -eq 0 ]
  run "$OPS/grant-key-access" --policy-name bats-fleet-access dana
  [ "$status" -eq 1 ]
  assert_contains "$output" "already has 2 access keys"
}

@test "grant-sso-access assigns an existing permission set to an Identity Center user" {
  local instance store ps
  instance=$(awsm sso-admin list-instances --query 'Instances[0].InstanceArn' --output text)
  store=$(awsm sso-admin list-instances --query 'Instances[0].IdentityStoreId' --output text)
  ps=$(awsm sso-admin list-permission-sets --instance-arn "$instance" --query 'PermissionSets[0]' --output text)
  if [[ -z $ps || $ps == None ]]; then
    ps=$(awsm sso-admin create-permission-set --instance-arn "$instance" --name LinuxbenchFleet \
      --query PermissionSet.PermissionSetArn --output text)
  fi
  awsm identitystore create-user --identity-store-id "$store" --user-name erin --display-name Erin \
    --name GivenName=Erin,FamilyName=Example >/dev/null

  FLEET_ACCOUNT_ID=$FLEET_ACCOUNT run "$OPS/grant-sso-access" erin
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  run awsm sso-admin list-account-assignments --instance-arn "$instance" --account-id "$FLEET_ACCOUNT" \
    --permission-set-arn "$ps" --query 'AccountAssignments[].PrincipalType' --output text
  [ "$output" = "USER" ]

  run "$OPS/grant-sso-access" --account-id "$FLEET_ACCOUNT" nobody-here
  [ "$status" -eq 1 ]
  assert_contains "$output" "no Identity Center user named nobody-here"
}
