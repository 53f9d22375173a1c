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
  awspy '
iam, bucket, role = aws("iam"), "lb-fleet-results-migrated", "linuxbench-worker"
aws("s3").head_bucket(Bucket=bucket)
trust = iam.get_role(RoleName=role)["Role"]["AssumeRolePolicyDocument"]
assert trust["Statement"][0]["Principal"]["Service"] == "ec2.amazonaws.com", trust
put = iam.get_role_policy(RoleName=role, PolicyName="linuxbench-fleet-worker")["PolicyDocument"]
assert same_json(put, open(args[0]).read()), put
profile = iam.get_instance_profile(InstanceProfileName=role)["InstanceProfile"]
assert [r["RoleName"] for r in profile["Roles"]] == [role], profile
block = aws("s3").get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
assert block["BlockPublicPolicy"] is True, block
' "$WORKER_POLICY"

  # a rerun keeps everything and succeeds
  run "$OPS/create-infra"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  assert_contains "$output" "role linuxbench-worker exists"
  assert_contains "$output" "instance profile linuxbench-worker exists"
  refute_contains "$output" "create-role"
}

@test "propagate-policy with 5 versions deletes the oldest non-default and makes the new one default" {
  local arn="arn:aws:iam::$MOTO_ACCOUNT:policy/linuxbench-fleet-access"
  # v1 to v5, v2 the default: the oldest NON-default version is v1
  awspy '
iam, arn, doc = aws("iam"), args[0], open(args[1]).read()
iam.create_policy(PolicyName="linuxbench-fleet-access", PolicyDocument=doc)
for _ in range(4):
    iam.create_policy_version(PolicyArn=arn, PolicyDocument=doc)
iam.set_default_policy_version(PolicyArn=arn, VersionId="v2")
instance = aws("sso-admin").list_instances()["Instances"][0]["InstanceArn"]
aws("sso-admin").create_permission_set(InstanceArn=instance, Name="LinuxbenchFleet")
' "$arn" "$WORKER_POLICY"

  run "$OPS/propagate-policy"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  assert_contains "$output" "deleting the oldest non-default, v1"

  # v6, the operator policy, is the new default, in the permission set's inline policy too
  awspy '
iam, sso, arn, doc = aws("iam"), aws("sso-admin"), args[0], open(args[1]).read()
versions = sorted(v["VersionId"] for v in iam.list_policy_versions(PolicyArn=arn)["Versions"])
assert versions == ["v2", "v3", "v4", "v5", "v6"], versions
assert iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"] == "v6"
assert same_json(iam.get_policy_version(PolicyArn=arn, VersionId="v6")["PolicyVersion"]["Document"], doc)
instance = sso.list_instances()["Instances"][0]["InstanceArn"]
(ps,) = sso.list_permission_sets(InstanceArn=instance)["PermissionSets"]
inline = sso.get_inline_policy_for_permission_set(InstanceArn=instance, PermissionSetArn=ps)["InlinePolicy"]
assert same_json(inline, doc), inline
' "$arn" "$OPERATOR_POLICY"

  # a second propagation rotates again: now v2 is the oldest non-default
  run "$OPS/propagate-policy" --no-sso
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  assert_contains "$output" "deleting the oldest non-default, v2"
  run awspy 'out(" ".join(sorted(v["VersionId"] for v in aws("iam").list_policy_versions(PolicyArn=args[0])["Versions"])))' "$arn"
  assert_equal "$output" "v3 v4 v5 v6 v7"
}

@test "propagate-policy below 5 versions deletes nothing; a missing policy is created" {
  local arn="arn:aws:iam::$MOTO_ACCOUNT:policy/bats-few-versions"
  awspy 'aws("iam").create_policy(PolicyName="bats-few-versions", PolicyDocument=open(args[0]).read())' "$WORKER_POLICY"
  run "$OPS/propagate-policy" --no-sso --policy-name bats-few-versions
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  refute_contains "$output" "delete-policy-version"
  run awspy 'out(aws("iam").get_policy(PolicyArn=args[0])["Policy"]["DefaultVersionId"])' "$arn"
  [ "$output" = "v2" ]

  run "$OPS/propagate-policy" --no-sso --policy-name bats-new-policy
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  assert_contains "$output" "iam create-policy --policy-name bats-new-policy"
  awspy 'aws("iam").get_policy(PolicyArn=args[0])' "arn:aws:iam::$MOTO_ACCOUNT:policy/bats-new-policy"
}

@test "grant-key-access creates the user, attaches the managed policy and prints a key pair" {
  run --separate-stderr "$OPS/grant-key-access" --policy-name bats-fleet-access dana
  [ "$status" -eq 0 ] || { echo "$output $stderr"; false; }
  assert_contains "$output" "AWS_ACCESS_KEY_ID="
  assert_contains "$output" "AWS_SECRET_ACCESS_KEY="
  # the managed policy, attached, was created from the operator policy
  awspy '
iam = aws("iam")
attached = iam.list_attached_user_policies(UserName="dana")["AttachedPolicies"]
assert [p["PolicyName"] for p in attached] == ["bats-fleet-access"], attached
document = iam.get_policy_version(PolicyArn=args[0], VersionId="v1")["PolicyVersion"]["Document"]
assert same_json(document, open(args[1]).read()), document
' "arn:aws:iam::$MOTO_ACCOUNT:policy/bats-fleet-access" "$OPERATOR_POLICY"

  # a second key is fine, a third is IAM's limit
  run "$OPS/grant-key-access" --policy-name bats-fleet-access dana
  [ "$status" -eq 0 ]
  run "$OPS/grant-key-access" --policy-name bats-fleet-access dana
  [ "$status" -eq 1 ]
  assert_contains "$output" "already has 2 access keys"
}

@test "grant-sso-access assigns an existing permission set to an Identity Center user" {
  local instance ps
  # the instance and its permission set (made here unless an earlier test made it), and a user
  run awspy '
sso = aws("sso-admin")
(instance,) = sso.list_instances()["Instances"]
arn = instance["InstanceArn"]
sets = sso.list_permission_sets(InstanceArn=arn)["PermissionSets"]
ps = sets[0] if sets else sso.create_permission_set(InstanceArn=arn, Name="LinuxbenchFleet")["PermissionSet"]["PermissionSetArn"]
aws("identitystore").create_user(
    IdentityStoreId=instance["IdentityStoreId"], UserName="erin", DisplayName="Erin",
    Name={"GivenName": "Erin", "FamilyName": "Example"},
)
out(f"{arn} {ps}")
'
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  read -r instance ps <<<"$output"

  FLEET_ACCOUNT_ID=$FLEET_ACCOUNT run "$OPS/grant-sso-access" erin
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  run awspy '
assigned = aws("sso-admin").list_account_assignments(InstanceArn=args[0], AccountId=args[1], PermissionSetArn=args[2])
out(" ".join(a["PrincipalType"] for a in assigned["AccountAssignments"]))
' "$instance" "$FLEET_ACCOUNT" "$ps"
  [ "$output" = "USER" ]

  run "$OPS/grant-sso-access" --account-id "$FLEET_ACCOUNT" nobody-here
  [ "$status" -eq 1 ]
  assert_contains "$output" "no Identity Center user named nobody-here"
}
