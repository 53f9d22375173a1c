"""The IAM policies: the evaluator, the proof against recorded calls, and two offline linters.

Tiers:
- unit tests of tests/testkit/iam_eval.py, the small policy evaluator they use;
- the call tables below (every AWS call the code makes, per side, with its code path and
  resources) checked against policies/*.json with the request context the code builds:
  what must be allowed is, what must not be is denied, and a policy grants nothing the
  code never asks for beyond a short list of documented exceptions;
- the proof (e2e): the smoke fleet runs on the embedded cloud with CT_FLEET_API_LOG, and
  every call it records is in the tables (so the tables cannot drift from the code);
- parliament and cloudsplaining, run as commands.
docs/access.md carries the same tables for people; a test keeps it complete.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from ct_fleet.protocol import (
    Ec2Config,
    artifact_key,
    log_key,
    manifest_key,
    queue_names,
    result_key,
    secret_bundle,
    secrets_prefix,
)
from ct_fleet.protocol.budget import budget_key
from ct_fleet.protocol.keys import checkpoints_prefix, done_marker_key, tail_marker_key
from ct_fleet.services import instances as fleet
from ct_fleet.services import launching, quotas, secrets
from testkit.fleet import run_cli
from testkit.iam_eval import (
    CALL_ACTIONS,
    MANAGED_POLICY_LIMIT,
    ROLE_INLINE_LIMIT,
    Request,
    UnsupportedPolicy,
    allowed_actions,
    arn_match,
    denied,
    evaluate,
    glob_match,
    iam_actions,
    is_allowed,
    managed_policy_size,
    parse_api_log,
    requests_for_call,
    statement_applies,
    substitute,
)

REPO = Path(__file__).resolve().parents[2]
OPERATOR_FILE = REPO / "policies" / "fleet-iam-policy.json"
WORKER_FILE = REPO / "policies" / "fleet-worker-iam-policy.json"
PARLIAMENT_CONFIG = REPO / "policies" / "parliament.yml"
ACCESS_DOC = REPO / "docs" / "access.md"
VENV_BIN = Path(sys.executable).parent
OPERATOR = json.loads(OPERATOR_FILE.read_text())
WORKER = json.loads(WORKER_FILE.read_text())
ACCOUNT = "123456789012"  # moto's default account: the embedded cloud's
REGION = "us-east-1"


# ======================================================================================
# 1. the evaluator
# ======================================================================================

POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Sid": "Read", "Effect": "Allow", "Action": "s3:Get*", "Resource": "arn:aws:s3:::b/*"},
        {"Sid": "NoSecrets", "Effect": "Deny", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/secret/*"},
        {
            "Sid": "OwnInstances",
            "Effect": "Allow",
            "Action": "ec2:TerminateInstances",
            "Resource": "arn:aws:ec2:*:*:instance/*",
            "Condition": {"StringEquals": {"ec2:ResourceTag/LaunchedBy": "${aws:username}"}},
        },
        {
            "Sid": "TaggedLaunch",
            "Effect": "Allow",
            "Action": "ec2:RunInstances",
            "Resource": "arn:aws:ec2:*:*:instance/*",
            "Condition": {
                "StringEquals": {"aws:RequestTag/Team": "research"},
                "StringLike": {"aws:RequestTag/Name": "ct-*"},
            },
        },
        {
            "Sid": "Home",
            "Effect": "Allow",
            "Action": "s3:PutObject",
            "Resource": "arn:aws:s3:::b/home/${aws:username}/*",
        },
    ],
}


def test_glob_matching_rules():
    assert glob_match("s3:Get*", "s3:GetObject")
    assert glob_match("S3:get*", "s3:GetObject", ignore_case=True)
    assert not glob_match("S3:get*", "s3:GetObject")
    assert glob_match("arn:aws:sqs:*:*:lb-fleet-*", "arn:aws:sqs:us-east-1:1:lb-fleet-abc-work")
    assert glob_match("a?c", "abc") and not glob_match("a?c", "abbc")
    assert arn_match("arn:aws:ec2:*:*:instance/*", "arn:aws:ec2:us-east-1:1:instance/i-1")
    assert not arn_match("arn:aws:ec2:us-west-2:*:instance/*", "arn:aws:ec2:us-east-1:1:instance/i-1")
    assert not arn_match("arn:aws:ec2:*:*:instance/*", "not-an-arn")


def test_allow_and_implicit_deny():
    assert is_allowed(POLICY, "s3:GetObject", "arn:aws:s3:::b/x")
    assert is_allowed(POLICY, "S3:GETOBJECT", "arn:aws:s3:::b/x"), "actions are case-insensitive"
    assert evaluate(POLICY, Request("s3:GetObject", "arn:aws:s3:::other/x"))[0] == "ImplicitDeny"
    assert evaluate(POLICY, Request("s3:DeleteObject", "arn:aws:s3:::b/x"))[0] == "ImplicitDeny"
    assert not is_allowed(POLICY, "s3:GetObject", "arn:aws:s3:::B/x"), "resources are case-sensitive"


def test_explicit_deny_wins():
    decision, sids = evaluate(POLICY, Request("s3:GetObject", "arn:aws:s3:::b/secret/key"))
    assert (decision, sids) == ("ExplicitDeny", ["NoSecrets"])


def test_tag_conditions_and_variables():
    instance = "arn:aws:ec2:us-east-1:1:instance/i-1"
    mine = {"aws:username": "alice", "ec2:ResourceTag/LaunchedBy": "alice"}
    theirs = {"aws:username": "alice", "ec2:ResourceTag/LaunchedBy": "bob"}
    assert is_allowed(POLICY, "ec2:TerminateInstances", instance, mine)
    assert not is_allowed(POLICY, "ec2:TerminateInstances", instance, theirs)
    assert is_allowed(
        POLICY, "ec2:TerminateInstances", instance, {"AWS:UserName": "alice", "ec2:resourcetag/launchedby": "alice"}
    ), "condition keys are case-insensitive"
    launch = {"aws:RequestTag/Team": "research", "aws:RequestTag/Name": "ct-fleet-1"}
    assert is_allowed(POLICY, "ec2:RunInstances", "arn:aws:ec2:us-east-1:1:instance/*", launch)
    assert not is_allowed(
        POLICY, "ec2:RunInstances", "arn:aws:ec2:us-east-1:1:instance/*", {**launch, "aws:RequestTag/Name": "x"}
    )
    assert not is_allowed(POLICY, "ec2:RunInstances", "arn:aws:ec2:us-east-1:1:instance/*", {}), "untagged launch"


def test_missing_variable_never_matches():
    instance = "arn:aws:ec2:us-east-1:1:instance/i-1"
    # An SSO session has no aws:username: the statement must not match, even for an empty tag.
    assert not is_allowed(POLICY, "ec2:TerminateInstances", instance, {"ec2:ResourceTag/LaunchedBy": ""})
    assert not is_allowed(POLICY, "ec2:TerminateInstances", instance, {"ec2:ResourceTag/LaunchedBy": "${aws:username}"})
    # ... in a Resource too
    assert is_allowed(POLICY, "s3:PutObject", "arn:aws:s3:::b/home/alice/f", {"aws:username": "alice"})
    assert not is_allowed(POLICY, "s3:PutObject", "arn:aws:s3:::b/home/alice/f", {})
    # ... and a Deny built on a missing variable silently does not apply (the AWS trap).
    deny_others = {
        "Statement": [
            {"Effect": "Allow", "Action": "ec2:TerminateInstances", "Resource": "*"},
            {
                "Effect": "Deny",
                "Action": "ec2:TerminateInstances",
                "Resource": "*",
                "Condition": {"StringNotEquals": {"ec2:ResourceTag/LaunchedBy": "${aws:username}"}},
            },
        ]
    }
    assert not is_allowed(
        deny_others, "ec2:TerminateInstances", instance, {"aws:username": "a", "ec2:ResourceTag/LaunchedBy": "b"}
    )
    assert is_allowed(deny_others, "ec2:TerminateInstances", instance, {"ec2:ResourceTag/LaunchedBy": "b"})


def test_variable_syntax():
    assert substitute("x/${aws:username}/${*}${?}${$}", {"aws:username": "u"}) == "x/u/*?$"
    assert substitute("${aws:PrincipalTag/team, 'none'}", {}) == "none"


def test_operators():
    def one(cond: dict[str, Any], ctx: dict[str, Any]) -> bool:
        policy = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": cond}]}
        return is_allowed(policy, "s3:GetObject", "arn:aws:s3:::b/k", ctx)

    assert one({"Null": {"aws:RequestTag/X": "true"}}, {})
    assert not one({"Null": {"aws:RequestTag/X": "true"}}, {"aws:RequestTag/X": "1"})
    assert one({"Null": {"aws:RequestTag/X": "false"}}, {"aws:RequestTag/X": "1"})
    assert one({"StringEqualsIfExists": {"k": "v"}}, {})
    assert not one({"StringEquals": {"k": "v"}}, {})
    assert one({"StringNotEquals": {"k": "v"}}, {}), "negated operators match an absent key"
    assert one({"StringEquals": {"k": ["a", "v"]}}, {"k": "v"}), "values of one key are ORed"
    assert not one({"StringEquals": {"k": "v", "j": "w"}}, {"k": "v"}), "keys are ANDed"
    assert one(
        {"ArnLike": {"aws:SourceArn": "arn:aws:ec2:*:*:instance/*"}}, {"aws:SourceArn": "arn:aws:ec2:r:1:instance/i-1"}
    )
    assert one(
        {"ArnEquals": {"a": "${ec2:SourceInstanceARN}"}},
        {"a": "arn:aws:ec2:r:1:instance/i-1", "ec2:SourceInstanceARN": "arn:aws:ec2:r:1:instance/i-1"},
    )
    assert one({"ForAllValues:StringEquals": {"aws:TagKeys": ["A", "B"]}}, {"aws:TagKeys": ["A"]})
    assert not one({"ForAllValues:StringEquals": {"aws:TagKeys": ["A"]}}, {"aws:TagKeys": ["A", "C"]})
    assert one({"ForAllValues:StringEquals": {"aws:TagKeys": ["A"]}}, {}), "vacuously true"
    assert one({"ForAnyValue:StringEquals": {"aws:TagKeys": ["C"]}}, {"aws:TagKeys": ["A", "C"]})
    assert not one({"ForAnyValue:StringEquals": {"aws:TagKeys": ["C"]}}, {})
    assert one({"Bool": {"aws:SecureTransport": "true"}}, {"aws:SecureTransport": True})
    with pytest.raises(UnsupportedPolicy):
        one({"NumericLessThan": {"k": "1"}}, {"k": "0"})


def test_not_action_and_not_resource():
    policy = {
        "Statement": [
            {"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"},
            {"Effect": "Deny", "Action": "s3:*", "NotResource": "arn:aws:s3:::b/*"},
        ]
    }
    assert is_allowed(policy, "s3:GetObject", "arn:aws:s3:::b/k")
    assert not is_allowed(policy, "s3:GetObject", "arn:aws:s3:::c/k")
    assert not is_allowed(policy, "iam:CreateRole", "*")


def test_call_mapping():
    assert iam_actions("sts:GetCallerIdentity") == ()
    assert iam_actions("s3:ListObjectsV2") == ("s3:ListBucket",)
    assert iam_actions("s3:HeadObject") == ("s3:GetObject",)
    assert iam_actions("s3:HeadBucket") == ("s3:ListBucket",)
    assert iam_actions("sqs:SendMessageBatch") == ("sqs:SendMessage",)
    assert iam_actions("ssm:GetParametersByPath") == ("ssm:GetParametersByPath",)
    with pytest.raises(KeyError):
        iam_actions("s3:SelectObjectContent")
    reqs = requests_for_call("s3:ListObjectsV2", ["arn:aws:s3:::b/prefix/"])
    assert [(r.action, r.resource) for r in reqs] == [("s3:ListBucket", "arn:aws:s3:::b")]
    reqs = requests_for_call("s3:HeadObject", ["arn:aws:s3:::b/k"])
    assert {(r.action, r.resource) for r in reqs} == {
        ("s3:GetObject", "arn:aws:s3:::b/k"),
        ("s3:ListBucket", "arn:aws:s3:::b"),
    }
    assert parse_api_log(["12 s3:PutObject worker\n", "13 sqs:ReceiveMessage\n", "\n"]) == [
        ("worker", 12, "s3:PutObject"),
        ("controller", 13, "sqs:ReceiveMessage"),
    ]


def test_every_mapped_action_is_a_real_iam_action():
    known = _known_actions()
    targets = {a for acts in CALL_ACTIONS.values() if acts for a in acts}
    targets |= {a for policy in (OPERATOR, WORKER) for a in allowed_actions(policy)}
    targets |= {a for stmt in WORKER["Statement"] + OPERATOR["Statement"] for a in _list(stmt.get("Action"))}
    unknown = sorted(a for a in targets if a.lower() not in known)
    assert not unknown, f"not IAM actions (per parliament's IAM data): {unknown}"


# ======================================================================================
# 2. the call tables: what each side calls, where, on what
# ======================================================================================


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _known_actions() -> set[str]:
    from parliament import iam_definition

    return {f"{svc['prefix']}:{p['privilege']}".lower() for svc in iam_definition for p in svc["privileges"]}


@dataclass
class Scope:
    """The names one fleet's calls touch; from the e2e run, or made up for the static checks."""

    fleet_id: str = "0123456789ab"
    launched_by: str = "alice"
    code_sha: str = "f" * 40
    instance_ids: list[str] = field(default_factory=lambda: ["i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"])
    job_ids: list[str] = field(default_factory=lambda: ["web-fix_login-e1", "ops-enable_tls-e1"])
    secret_names: tuple[str, ...] = ("ANTHROPIC_API_KEY", "GH_TOKEN")
    config: Ec2Config = field(default_factory=Ec2Config)
    account: str = ACCOUNT
    region: str = REGION

    # -- ARNs ----------------------------------------------------------------------------
    def queues(self, *roles: str) -> list[str]:
        names = queue_names(self.fleet_id)
        return [f"arn:aws:sqs:{self.region}:{self.account}:{names[r]}" for r in roles or ("work", "done", "dlq")]

    def obj(self, key: str) -> str:
        return f"arn:aws:s3:::{self.config.bucket}/{key}"

    def bucket(self) -> str:
        return f"arn:aws:s3:::{self.config.bucket}"

    def param(self, name: str, account: str | None = None) -> str:
        return f"arn:aws:ssm:{self.region}:{self.account if account is None else account}:parameter{name}"

    def ec2(self, what: str, account: str | None = None) -> str:
        return f"arn:aws:ec2:{self.region}:{self.account if account is None else account}:{what}"

    def instance_arn(self, instance_id: str) -> str:
        return self.ec2(f"instance/{instance_id}")

    def role_arn(self) -> str:
        # ops/create-infra names the role like its instance profile.
        return f"arn:aws:iam::{self.account}:role/{self.config.instance_profile}"

    def results(self) -> list[str]:
        return [self.obj(result_key(self.fleet_id, j)) for j in self.job_ids]

    def checkpoint(self) -> str:
        """An object of a --checkpoint job's checkpoints."""
        return self.obj(checkpoints_prefix(self.fleet_id, self.job_ids[0]) + "ckpt-00001.json")

    def logs(self) -> list[str]:
        return [self.obj(log_key(self.fleet_id, i)) for i in self.instance_ids]

    def secret_params(self, instance_id: str | None = None) -> list[str]:
        ids = [instance_id] if instance_id else self.instance_ids
        return [self.param(secret_bundle(self.fleet_id, i)) for i in ids]


class Recorder:
    """Captures the request a function of ours builds for a boto3 client, with no AWS at all.

    Only for reading the request context (tags, instance profile) the code sends; what AWS
    does with such requests is the e2e run's business (against moto)."""

    def __init__(self, responses: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.responses = responses or {}

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            return self.responses.get(name, {})

        return call


def _tag_context(tags: list[dict[str, str]]) -> dict[str, Any]:
    ctx: dict[str, Any] = {f"aws:RequestTag/{t['Key']}": t["Value"] for t in tags}
    ctx["aws:TagKeys"] = [t["Key"] for t in tags]
    return ctx


TEMPLATE_ID = "lt-0123456789abcdef0"


def _template_call(s: Scope) -> dict[str, Any]:
    """The CreateLaunchTemplate request launching.put_launch_template builds."""
    rec = Recorder(
        {
            "describe_launch_templates": {"LaunchTemplates": []},
            "create_launch_template": {"LaunchTemplate": {"LaunchTemplateId": TEMPLATE_ID}},
        }
    )
    launching.put_launch_template(
        rec,
        ami="ami-0123456789abcdef0",
        config=s.config,
        fleet_id=s.fleet_id,
        launched_by=s.launched_by,
        user_data="#!/bin/bash\n",
        security_group_id="sg-0123456789abcdef0",
    )
    ((_, kw),) = [c for c in rec.calls if c[0] == "create_launch_template"]
    return kw


def create_launch_template_requests(s: Scope) -> list[Request]:
    kw = _template_call(s)
    (spec,) = kw["TagSpecifications"]
    return requests_for_call("ec2:CreateLaunchTemplate", [s.ec2("launch-template/*")], _tag_context(spec["Tags"]))


def fleet_launch_requests(
    s: Scope, market: str = "on-demand", tags_override: list[dict[str, str]] | None = None
) -> list[Request]:
    """launching.create_fleet as IAM sees it: CreateFleet on the fleet request, and the
    RunInstances EC2 Fleet makes in the caller's name with what the launch template holds."""
    rec = Recorder({"create_fleet": {"Instances": [{"InstanceIds": s.instance_ids}]}})
    pools = [launching.Pool(s.config.instance_type, "subnet-0123456789abcdef0", f"{s.region}a")]
    launching.create_fleet(
        rec,
        template_id=TEMPLATE_ID,
        pools=pools,
        count=len(s.instance_ids),
        market=market,
        fleet_id=s.fleet_id,
        launched_by=s.launched_by,
    )
    ((name, kw),) = rec.calls
    assert name == "create_fleet"
    (fleet_spec,) = kw["TagSpecifications"]
    data = _template_call(s)["LaunchTemplateData"]
    (instance_spec,) = [t for t in data["TagSpecifications"] if t["ResourceType"] == "instance"]
    tags = instance_spec["Tags"] if tags_override is None else tags_override
    resources = [
        f"arn:aws:ec2:{s.region}::image/{data['ImageId']}",
        s.ec2("instance/*"),
        s.ec2("volume/*"),
        s.ec2("network-interface/*"),
        *[s.ec2(f"subnet/{o['SubnetId']}") for o in kw["LaunchTemplateConfigs"][0]["Overrides"]],
        *[s.ec2(f"security-group/{g}") for g in data["SecurityGroupIds"]],
        s.ec2(f"launch-template/{kw['LaunchTemplateConfigs'][0]['LaunchTemplateSpecification']['LaunchTemplateId']}"),
    ]
    # EC2 authorises CreateFleet on the fleet and on every resource its launches use.
    fleet_request = requests_for_call(
        "ec2:CreateFleet", [s.ec2("fleet/*"), *resources], _tag_context(fleet_spec["Tags"])
    )
    if kw["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "spot":
        resources.append(s.ec2("spot-instances-request/*"))
    role = s.role_arn() if data.get("IamInstanceProfile", {}).get("Name") == s.config.instance_profile else None
    launches = requests_for_call("ec2:RunInstances", resources, _tag_context(tags) if tags else {}, passed_role=role)
    return fleet_request + launches


def own_fleet_resource_requests(call: str, kinds: tuple[str, ...]) -> Callable[[Scope], list[Request]]:
    """A call on the fleet's own tagged resources (teardown deletes its template and requests)."""

    def requests(s: Scope) -> list[Request]:
        tags = fleet.fleet_tags(s.fleet_id, s.launched_by)
        per = {
            s.ec2(kind): {
                **{f"ec2:ResourceTag/{t['Key']}": t["Value"] for t in tags},
                **{f"aws:ResourceTag/{t['Key']}": t["Value"] for t in tags},
            }
            for kind in kinds
        }
        return requests_for_call(call, list(per), resource_context=per)

    return requests


def create_security_group_requests(s: Scope) -> list[Request]:
    rec = Recorder({"describe_security_groups": {"SecurityGroups": []}, "create_security_group": {"GroupId": "sg-1"}})
    fleet.ensure_security_group(rec, s.config.security_group)
    ((_, kw),) = [c for c in rec.calls if c[0] == "create_security_group"]
    (spec,) = kw["TagSpecifications"]
    return requests_for_call(
        "ec2:CreateSecurityGroup",
        [s.ec2("security-group/*"), s.ec2("vpc/vpc-0123456789abcdef0")],
        _tag_context(spec["Tags"]),
    )


def secret_puts(s: Scope) -> list[tuple[str, dict[str, Any]]]:
    """(parameter ARN, its tags as aws:ResourceTag context) as secrets.put_for_instances writes them."""
    rec = Recorder()
    secrets.put_for_instances(
        rec, s.fleet_id, s.instance_ids, {n: "value" for n in s.secret_names}, account=s.account, region=s.region
    )
    out = []
    for name, kw in rec.calls:
        assert name == "put_parameter"
        out.append((s.param(kw["Name"]), {f"aws:ResourceTag/{t['Key']}": t["Value"] for t in kw["Tags"]}))
    return out


def put_parameter_requests(s: Scope) -> list[Request]:
    rec = Recorder()
    secrets.put_for_instances(
        rec, s.fleet_id, s.instance_ids[:1], {s.secret_names[0]: "v"}, account=s.account, region=s.region
    )
    ((_, kw),) = rec.calls
    return requests_for_call("ssm:PutParameter", s.secret_params(), _tag_context(kw["Tags"]))


def terminate_requests(s: Scope, launched_by: str | None = None) -> list[Request]:
    tags = fleet.fleet_tags(s.fleet_id, launched_by or s.launched_by)
    per = {
        s.instance_arn(i): {
            **{f"ec2:ResourceTag/{t['Key']}": t["Value"] for t in tags},
            **{f"aws:ResourceTag/{t['Key']}": t["Value"] for t in tags},
        }
        for i in s.instance_ids
    }
    return requests_for_call("ec2:TerminateInstances", list(per), resource_context=per)


def worker_secret_requests(s: Scope, reader: str, owner: str | None = None) -> list[Request]:
    """Instance `reader` fetching the secrets of instance `owner` (itself by default)."""
    owner = owner or reader
    ctx = {"ec2:SourceInstanceARN": s.instance_arn(reader)}
    out = []
    for arn, tags in secret_puts(s):
        if f"/{owner}/" in arn:
            out += requests_for_call("ssm:GetParameters", [arn], ctx, resource_context={arn: tags})
    assert out, "no secret written for that instance"
    return out


@dataclass(frozen=True)
class Call:
    code_path: str
    requests: Callable[[Scope], list[Request]]


def _simple(call: str, resources: Callable[[Scope], list[str]]) -> Callable[[Scope], list[Request]]:
    return lambda s: requests_for_call(call, resources(s))


def _ALL_OBJECTS(s):
    return [s.obj(manifest_key(s.fleet_id)), s.obj(artifact_key(s.code_sha)), *s.results()[:1], *s.logs()[:1]]


_EXTRA_SRC_KEY = "artifacts/extra-tree-0123456789abcdef.tar.gz"  # code.upload_extra_src
_UPLOADS = lambda s: [s.obj(manifest_key(s.fleet_id)), s.obj(artifact_key(s.code_sha)), s.obj(_EXTRA_SRC_KEY)]  # noqa: E731

# Every AWS call of the controller (the researcher's machine: operator policy).
CONTROLLER_CALLS: dict[str, Call] = {
    "sts:GetCallerIdentity": Call(
        "credentials.launched_by, cli._run (account id)", _simple("sts:GetCallerIdentity", lambda s: ["*"])
    ),
    "s3:HeadBucket": Call("store.ensure_bucket", _simple("s3:HeadBucket", lambda s: [s.bucket()])),
    "s3:ListObjectsV2": Call(
        "store.list_result_job_ids (resume)", _simple("s3:ListObjectsV2", lambda s: [s.obj(f"{s.fleet_id}/")])
    ),
    "s3:HeadObject": Call(
        "store.exists (upload_artifact), store.download_result", _simple("s3:HeadObject", _ALL_OBJECTS)
    ),
    "s3:GetObject": Call(
        "store.get_manifest, store.download_result, controller._bootstrap_failure (logs)",
        _simple("s3:GetObject", _ALL_OBJECTS),
    ),
    "s3:PutObject": Call(
        "store.put_manifest, store.upload_artifact, code.upload_extra_src", _simple("s3:PutObject", _UPLOADS)
    ),
    "s3:CreateMultipartUpload": Call(
        "store.upload_artifact, code.upload_extra_src (> 8 MB)", _simple("s3:CreateMultipartUpload", _UPLOADS)
    ),
    "s3:UploadPart": Call("store.upload_artifact, code.upload_extra_src (> 8 MB)", _simple("s3:UploadPart", _UPLOADS)),
    "s3:CompleteMultipartUpload": Call(
        "store.upload_artifact, code.upload_extra_src (> 8 MB)", _simple("s3:CompleteMultipartUpload", _UPLOADS)
    ),
    "s3:DeleteObject": Call(
        "controller._collect_downloads (unreadable result)", _simple("s3:DeleteObject", lambda s: s.results())
    ),
    "sqs:CreateQueue": Call("queues.ensure_queues", _simple("sqs:CreateQueue", lambda s: s.queues())),
    "sqs:GetQueueAttributes": Call(
        "queues.ensure_queues (DLQ arn), queues.depths", _simple("sqs:GetQueueAttributes", lambda s: s.queues())
    ),
    "sqs:GetQueueUrl": Call("queues.find_queues (resume, adopt)", _simple("sqs:GetQueueUrl", lambda s: s.queues())),
    "sqs:SendMessageBatch": Call(
        "queues.send_batch (enqueue, re-enqueue)", _simple("sqs:SendMessageBatch", lambda s: s.queues("work"))
    ),
    "sqs:ReceiveMessage": Call(
        "queues.receive (done queue, DLQ drain)", _simple("sqs:ReceiveMessage", lambda s: s.queues("done", "dlq"))
    ),
    "sqs:DeleteMessageBatch": Call(
        "queues.delete_batch", _simple("sqs:DeleteMessageBatch", lambda s: s.queues("done", "dlq"))
    ),
    "sqs:DeleteMessage": Call(
        "queues.delete_batch (failed batch entries)", _simple("sqs:DeleteMessage", lambda s: s.queues("done", "dlq"))
    ),
    "sqs:PurgeQueue": Call(
        "the controller (stale queues of a fleet whose workers are gone)",
        _simple("sqs:PurgeQueue", lambda s: s.queues("work")),
    ),
    "sqs:DeleteQueue": Call("queues.delete_queues (teardown)", _simple("sqs:DeleteQueue", lambda s: s.queues())),
    "ec2:DescribeInstances": Call("fleet.live_instances", _simple("ec2:DescribeInstances", lambda s: ["*"])),
    "ec2:DescribeSecurityGroups": Call(
        "fleet.ensure_security_group", _simple("ec2:DescribeSecurityGroups", lambda s: ["*"])
    ),
    "ec2:CreateSecurityGroup": Call(
        "fleet.ensure_security_group (first fleet in a region)", create_security_group_requests
    ),
    "ec2:CreateLaunchTemplate": Call("launching.put_launch_template (first launch)", create_launch_template_requests),
    "ec2:DescribeLaunchTemplates": Call(
        "launching.put_launch_template, launching.delete_launch_templates",
        _simple("ec2:DescribeLaunchTemplates", lambda s: ["*"]),
    ),
    "ec2:DeleteLaunchTemplate": Call(
        "launching.delete_launch_templates (teardown, a rerun's new template)",
        own_fleet_resource_requests("ec2:DeleteLaunchTemplate", (f"launch-template/{TEMPLATE_ID}",)),
    ),
    "ec2:CreateFleet": Call(
        "launching.create_fleet (each launch batch; it runs RunInstances in the caller's name)",
        lambda s: fleet_launch_requests(s) + fleet_launch_requests(s, "spot"),
    ),
    "ec2:DescribeFleets": Call(
        "launching.delete_fleet_requests (teardown)", _simple("ec2:DescribeFleets", lambda s: ["*"])
    ),
    "ec2:DeleteFleets": Call(
        "launching.delete_fleet_requests (teardown)",
        own_fleet_resource_requests("ec2:DeleteFleets", ("fleet/fleet-0123", "instance/i-0aaaaaaaaaaaaaaa1")),
    ),
    "ec2:DescribeSubnets": Call(
        "launching.pools_of (before anything exists)", _simple("ec2:DescribeSubnets", lambda s: ["*"])
    ),
    "ec2:DescribeInstanceTypes": Call(
        "launching.vcpus_of, quotas.vcpus_in_use (before anything exists)",
        _simple("ec2:DescribeInstanceTypes", lambda s: ["*"]),
    ),
    "ec2:DescribeSpotPriceHistory": Call(
        "prices.spot_price (each spot pool launched into, on AWS)",
        _simple("ec2:DescribeSpotPriceHistory", lambda s: ["*"]),
    ),
    "service-quotas:GetServiceQuota": Call(
        "quotas.vcpu_quota (before anything exists)",
        _simple(
            "service-quotas:GetServiceQuota",
            lambda s: [
                f"arn:aws:servicequotas:{s.region}:{s.account}:ec2/{code}" for code in quotas.QUOTA_CODES.values()
            ],
        ),
    ),
    "ec2:TerminateInstances": Call("fleet.terminate (teardown, hard timeouts)", terminate_requests),
    "ssm:GetParameter": Call(
        "fleet.resolve_ami (worker AMI id, ami=<param>, stock Ubuntu); secrets.parameter_exists (registry auth)",
        _simple(
            "ssm:GetParameter",
            lambda s: [
                s.param(s.config.ami_param),
                s.param(s.config.stock_ami_param, account=""),
                s.param("/linuxbench/docker-org-name"),
            ],
        ),
    ),
    "ssm:PutParameter": Call("secrets.put_for_instances", put_parameter_requests),
    "ssm:GetParametersByPath": Call(
        "secrets.delete_fleet_secrets",
        _simple("ssm:GetParametersByPath", lambda s: [s.param(secrets_prefix(s.fleet_id))]),
    ),
    "ssm:DeleteParameters": Call(
        "secrets.delete_fleet_secrets", _simple("ssm:DeleteParameters", lambda s: s.secret_params())
    ),
}

# The embedded cloud plays the admin too (cloud.prepare_embedded_account: what
# ops/create-infra and bin/build-ami do once on AWS) and runs instances locally
# (LocalInstanceRunner reads user-data). Never on AWS; the operator policy must not allow them.
EMBEDDED_ONLY = {
    "s3:CreateBucket": "prepare_embedded_account: the results bucket (ops/create-infra)",
    "iam:GetInstanceProfile": "prepare_embedded_account: the worker role (ops/create-infra)",
    "iam:CreateRole": "prepare_embedded_account: the worker role (ops/create-infra)",
    "iam:CreateInstanceProfile": "prepare_embedded_account: the instance profile (ops/create-infra)",
    "iam:AddRoleToInstanceProfile": "prepare_embedded_account: the instance profile (ops/create-infra)",
    "ec2:RegisterImage": "prepare_embedded_account: a local worker image (bin/build-ami)",
    "ec2:DescribeInstanceAttribute": "LocalInstanceRunner.start reads user-data to run it locally",
    # and ssm:PutParameter of /linuxbench/worker-ami-id (bin/build-ami's rotation): same call
    # as the secrets, so it is asserted separately (test_operator_cannot_do_admin_work).
}

# Every AWS call of the worker's Python job loop (python -m ct_fleet.worker).
WORKER_CALLS: dict[str, Call] = {
    "sqs:GetQueueUrl": Call("Worker.__init__", _simple("sqs:GetQueueUrl", lambda s: s.queues("work", "done"))),
    "sqs:ReceiveMessage": Call(
        "Worker.run (queues.receive)", _simple("sqs:ReceiveMessage", lambda s: s.queues("work"))
    ),
    "sqs:SendMessageBatch": Call(
        "Worker._post (done messages, heartbeats)", _simple("sqs:SendMessageBatch", lambda s: s.queues("done"))
    ),
    "sqs:DeleteMessageBatch": Call(
        "Worker.handle (queues.delete_batch)", _simple("sqs:DeleteMessageBatch", lambda s: s.queues("work"))
    ),
    "sqs:DeleteMessage": Call(
        "queues.delete_batch (failed batch entries)", _simple("sqs:DeleteMessage", lambda s: s.queues("work"))
    ),
    "sqs:ChangeMessageVisibilityBatch": Call(
        "VisibilityKeeper.run, Worker.handle (retry backoff), Worker._release_all (spot)",
        _simple("sqs:ChangeMessageVisibilityBatch", lambda s: s.queues("work")),
    ),
    "s3:HeadObject": Call(
        "Worker.handle: store.exists (duplicate check); the fleet-done and queue's-tail markers",
        _simple(
            "s3:HeadObject",
            lambda s: [*s.results(), s.obj(done_marker_key(s.fleet_id)), s.obj(tail_marker_key(s.fleet_id))],
        ),
    ),
    "s3:GetObject": Call(
        "worker/budget.py start (the fleet's model budget); a --checkpoint job's resume",
        _simple("s3:GetObject", lambda s: [s.obj(budget_key(s.fleet_id)), s.checkpoint()]),
    ),
    "s3:PutObject": Call(
        "Worker.handle: upload_file (result); a --checkpoint job's checkpoints",
        _simple("s3:PutObject", lambda s: [*s.results(), s.checkpoint()]),
    ),
    "s3:DeleteObject": Call(
        "worker/checkpoints.py delete (a stored result's checkpoints, an earlier attempt's)",
        _simple("s3:DeleteObject", lambda s: [s.checkpoint()]),
    ),
    "s3:CreateMultipartUpload": Call(
        "Worker.handle: upload_file (result > 8 MB)", _simple("s3:CreateMultipartUpload", lambda s: s.results())
    ),
    "s3:UploadPart": Call(
        "Worker.handle: upload_file (result > 8 MB)", _simple("s3:UploadPart", lambda s: s.results())
    ),
    "s3:CompleteMultipartUpload": Call(
        "Worker.handle: upload_file (result > 8 MB)", _simple("s3:CompleteMultipartUpload", lambda s: s.results())
    ),
}

# The AWS CLI calls of the worker's bash steps: not in the API log (the CLI is not our
# boto3), so declared here; test_cli_calls_in_worker_scripts_are_declared keeps this honest.
WORKER_CLI_CALLS: dict[str, Call] = {
    "s3 cp s3://BUCKET/artifacts/SHA.tar.gz (download)": Call(
        "worker/fetch-code.sh (bootstrap's first step)",
        lambda s: [
            r
            for c in ("s3:HeadObject", "s3:GetObject")
            for r in requests_for_call(c, [s.obj(artifact_key(s.code_sha))])
        ],
    ),
    "s3 cp s3://BUCKET/artifacts/... (extra-src download)": Call(
        "worker/worker-setup.sh (EXTRA_SRC_KEYS, from code.upload_extra_src)",
        lambda s: [r for c in ("s3:HeadObject", "s3:GetObject") for r in requests_for_call(c, [s.obj(_EXTRA_SRC_KEY)])],
    ),
    "s3 cp LOG s3://BUCKET/FLEET/logs/ID-bootstrap.log (upload)": Call(
        "worker/upload-log.sh", lambda s: requests_for_call("s3:PutObject", s.logs()[:1])
    ),
    "ssm get-parameters --with-decryption (own secrets)": Call(
        "worker/fetch-secrets.sh", lambda s: worker_secret_requests(s, s.instance_ids[0])
    ),
    "ssm get-parameter (docker-org-name, docker-org-pat)": Call(
        "worker/docker-login.sh",
        lambda s: requests_for_call(
            "ssm:GetParameter", [s.param("/linuxbench/docker-org-name"), s.param("/linuxbench/docker-org-pat")]
        ),
    ),
}
CLI_COMMANDS_DECLARED = {("s3", "cp"), ("ssm", "get-parameters"), ("ssm", "get-parameter")}
# `shutdown -h now` needs no IAM on EC2 (InstanceInitiatedShutdownBehavior=terminate); the
# embedded cloud's shim terminates through the API instead, with the embedded keys.
CLI_COMMANDS_EMBEDDED_ONLY = {("ec2", "terminate-instances"): "lib/ct_fleet/cloud/shims/shutdown (embedded cloud only)"}

# Allowed, though the code above never calls them: each with its reason (docs/access.md).
OPERATOR_EXCEPTIONS = {
    "ec2:DescribeInstanceStatus": "the EC2 console link printed after launch (Instances view) and `cloud status`",
    "ec2:DescribeImages": "the EC2 console and `cloud status` (which AMI the workers run)",
    "sqs:ListQueues": "`ct-fleet cloud status` lists lb-fleet-* queues (ListQueues takes no resource ARN)",
    "s3:AbortMultipartUpload": "s3transfer aborts a failed multipart upload of a large artifact",
}
WORKER_EXCEPTIONS = {
    "sqs:GetQueueAttributes": "queue depth when a worker step is rerun by hand (queues.depths)",
    "s3:AbortMultipartUpload": "s3transfer aborts a failed multipart upload of a large result",
}
# Calls in the tables the smoke run may legitimately not make (failure, resume, size or
# timing paths); every other table entry must show up in the recorded log.
NOT_ALWAYS_RECORDED = {
    "controller": {
        "s3:ListObjectsV2",
        "s3:DeleteObject",
        "s3:CreateMultipartUpload",
        "s3:UploadPart",
        "s3:CompleteMultipartUpload",
        "sqs:PurgeQueue",
        "sqs:DeleteMessage",
        "ec2:TerminateInstances",
        "ec2:DescribeSpotPriceHistory",
    },
    "worker": {
        "s3:DeleteObject",  # only --checkpoint jobs
        "sqs:DeleteMessage",
        "s3:CreateMultipartUpload",
        "s3:UploadPart",
        "s3:CompleteMultipartUpload",
        "sqs:ChangeMessageVisibilityBatch",
    },
}


def operator_contexts(launched_by: str) -> dict[str, dict[str, str]]:
    """The two ways a teammate signs in, as IAM sees them (iam-and-packer-facts.md)."""
    return {
        "static IAM keys": {"aws:username": launched_by, "aws:PrincipalType": "User"},
        # Identity Center: no aws:username; the ABAC session tag LaunchedBy=${path:userName}
        "SSO session": {"aws:PrincipalTag/LaunchedBy": launched_by, "aws:PrincipalType": "AssumedRole"},
    }


def with_identity(requests: list[Request], identity: dict[str, str]) -> list[Request]:
    return [Request(r.action, r.resource, {**identity, **r.context}) for r in requests]


def worker_identity(s: Scope) -> dict[str, str]:
    return {"ec2:SourceInstanceARN": s.instance_arn(s.instance_ids[0]), "aws:PrincipalType": "AssumedRole"}


def _fmt(failures: list[tuple[Request, str]]) -> str:
    return "\n".join(f"  {d}: {r.action} on {r.resource} ctx={dict(r.context)}" for r, d in failures)


def check_tables(s: Scope) -> None:
    for name, identity in operator_contexts(s.launched_by).items():
        for call, spec in CONTROLLER_CALLS.items():
            bad = denied(OPERATOR, with_identity(spec.requests(s), identity))
            assert not bad, f"operator policy ({name}) denies {call} of {spec.code_path}:\n{_fmt(bad)}"
    for call, spec in {**WORKER_CALLS, **WORKER_CLI_CALLS}.items():
        bad = denied(WORKER, with_identity(spec.requests(s), worker_identity(s)))
        assert not bad, f"worker policy denies {call} of {spec.code_path}:\n{_fmt(bad)}"


def test_every_call_of_the_code_is_allowed():
    check_tables(Scope())


def test_ssm_secret_arns_and_tags_come_from_the_code():
    s = Scope()
    arns = [arn for arn, _ in secret_puts(s)]
    assert sorted(arns) == sorted(s.secret_params())
    for arn, tags in secret_puts(s):
        instance_id = arn.split("/")[-2]
        assert tags["aws:ResourceTag/InstanceArn"] == s.instance_arn(instance_id)


def _used_actions(tables: list[dict[str, Call]], s: Scope) -> set[str]:
    return {r.action.lower() for table in tables for spec in table.values() for r in spec.requests(s)}


@pytest.mark.parametrize(
    ("policy", "tables", "exceptions"),
    [
        (OPERATOR, [CONTROLLER_CALLS], OPERATOR_EXCEPTIONS),
        (WORKER, [WORKER_CALLS, WORKER_CLI_CALLS], WORKER_EXCEPTIONS),
    ],
    ids=["operator", "worker"],
)
def test_policy_allows_nothing_unused_beyond_documented_exceptions(policy, tables, exceptions):
    allowed = {a.lower(): a for a in allowed_actions(policy)}
    assert not [a for a in allowed if "*" in a or "?" in a], "no wildcard actions: each one is accounted for"
    unused = {allowed[a] for a in set(allowed) - _used_actions(tables, Scope())}
    undocumented = unused - set(exceptions)
    assert not undocumented, f"allowed but never called, and not a documented exception: {sorted(undocumented)}"
    stale = {a for a in exceptions if a.lower() not in allowed}
    assert not stale, f"documented exceptions the policy no longer allows: {sorted(stale)}"


# Allow statements no call in the tables needs, each with its reason (docs/access.md).
OPERATOR_STATEMENT_EXCEPTIONS = {
    "ListQueuesForStatus": "`ct-fleet cloud status`",
    "WriteDockerRegistryAuth": "bin/put-docker-org-auth-ssm stores the registry auth workers read",
}


@pytest.mark.parametrize(
    ("policy", "requests_of", "exceptions"),
    [
        (
            OPERATOR,
            lambda s: [
                r
                for ctx in operator_contexts(s.launched_by).values()
                for spec in CONTROLLER_CALLS.values()
                for r in with_identity(spec.requests(s), ctx)
            ],
            OPERATOR_STATEMENT_EXCEPTIONS,
        ),
        (
            WORKER,
            lambda s: [
                r
                for t in (WORKER_CALLS, WORKER_CLI_CALLS)
                for spec in t.values()
                for r in with_identity(spec.requests(s), worker_identity(s))
            ],
            {},
        ),
    ],
    ids=["operator", "worker"],
)
def test_every_allow_statement_is_needed(policy, requests_of, exceptions):
    requests = requests_of(Scope())
    idle = [
        stmt["Sid"]
        for stmt in policy["Statement"]
        if stmt["Effect"] == "Allow" and not any(statement_applies(stmt, r) for r in requests)
    ]
    assert sorted(idle) == sorted(exceptions), (
        "Allow statements no call of the code needs (remove, or document the reason)"
    )


# -- what must be denied ----------------------------------------------------------------


@pytest.mark.parametrize("identity", ["static IAM keys", "SSO session"])
def test_terminating_someone_elses_instance_is_denied(identity):
    s = Scope()
    ctx = operator_contexts("alice")[identity]
    assert not denied(OPERATOR, with_identity(terminate_requests(s, launched_by="alice"), ctx))
    for request in with_identity(terminate_requests(s, launched_by="bob"), ctx):
        assert evaluate(OPERATOR, request)[0] == "ImplicitDeny", request
    # an identity with neither variable (another role) terminates nothing, even untagged-looking ones
    for request in with_identity(terminate_requests(s, launched_by=""), {"aws:PrincipalType": "AssumedRole"}):
        assert not is_allowed(OPERATOR, request.action, request.resource, request.context)


@pytest.mark.parametrize("identity", ["static IAM keys", "SSO session"])
def test_retagging_an_instance_to_take_it_over_is_denied(identity):
    s = Scope()
    ctx = {
        **operator_contexts("alice")[identity],
        "aws:RequestTag/LaunchedBy": "alice",
        "ec2:ResourceTag/LaunchedBy": "bob",
    }
    assert not is_allowed(OPERATOR, "ec2:CreateTags", s.instance_arn("i-0bbbbbbbbbbbbbbb1"), ctx)
    assert not is_allowed(OPERATOR, "ec2:DeleteTags", s.instance_arn("i-0bbbbbbbbbbbbbbb1"), ctx)


@pytest.mark.parametrize("identity", ["static IAM keys", "SSO session"])
def test_run_instances_without_the_tags_is_denied(identity):
    s = Scope()
    ctx = operator_contexts("alice")[identity]

    def instance_denied(tags: list[dict[str, str]]) -> bool:
        requests = with_identity(fleet_launch_requests(s, tags_override=tags), ctx)
        return any(r.action == "ec2:RunInstances" and "instance/" in r.resource for r, _ in denied(OPERATOR, requests))

    good = fleet.fleet_tags(s.fleet_id, "alice")
    assert not instance_denied(good)
    assert instance_denied([])
    assert instance_denied([t for t in good if t["Key"] != "ManagedBy"])
    assert instance_denied([t for t in good if t["Key"] != "LaunchedBy"])
    assert instance_denied(fleet.fleet_tags(s.fleet_id, "bob")), "launching in someone else's name"
    assert instance_denied([{**t, "Value": "other"} if t["Key"] == "ManagedBy" else t for t in good])


def test_pass_role_only_the_worker_role_only_to_ec2():
    s = Scope()
    assert is_allowed(OPERATOR, "iam:PassRole", s.role_arn(), {"iam:PassedToService": "ec2.amazonaws.com"})
    assert not is_allowed(OPERATOR, "iam:PassRole", s.role_arn(), {"iam:PassedToService": "lambda.amazonaws.com"})
    assert not is_allowed(
        OPERATOR, "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/Admin", {"iam:PassedToService": "ec2.amazonaws.com"}
    )


def test_operator_is_fenced_to_fleet_resources():
    s = Scope()
    ctx = operator_contexts("alice")["static IAM keys"]
    assert not is_allowed(OPERATOR, "sqs:ReceiveMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:payments", ctx)
    assert not is_allowed(OPERATOR, "s3:GetObject", "arn:aws:s3:::another-bucket/k", ctx)
    assert not is_allowed(OPERATOR, "ssm:GetParameter", s.param("/prod/db-password"), ctx)
    assert not is_allowed(OPERATOR, "ssm:PutParameter", s.param("/linuxbench/other"), ctx)


def test_operator_cannot_do_admin_work():
    s = Scope()
    for name, ctx in operator_contexts("alice").items():
        # a teammate must not point every teammate's workers at another AMI
        assert not is_allowed(OPERATOR, "ssm:PutParameter", s.param(s.config.ami_param), ctx), name
        for call in EMBEDDED_ONLY:
            for action in iam_actions(call):
                assert not is_allowed(OPERATOR, action, "*", ctx), f"{action} is admin-only"
                assert not is_allowed(OPERATOR, action, s.ec2("instance/i-1"), ctx), f"{action} is admin-only"
        for action in (
            "iam:CreateRole",
            "iam:AttachRolePolicy",
            "iam:PutRolePolicy",
            "ec2:CreateImage",
            "ec2:ModifyInstanceAttribute",
        ):
            assert not is_allowed(OPERATOR, action, "*", ctx)


def test_worker_reads_only_its_own_secrets():
    s = Scope()
    mine, other = s.instance_ids
    assert not denied(WORKER, worker_secret_requests(s, mine))
    stolen = worker_secret_requests(s, reader=mine, owner=other)
    assert [d for _, d in denied(WORKER, stolen)] == ["ImplicitDeny"] * len(stolen)
    # without an instance ARN (keys used off the instance) nothing matches
    bare = [
        Request(r.action, r.resource, {k: v for k, v in r.context.items() if k != "ec2:SourceInstanceARN"})
        for r in worker_secret_requests(s, mine)
    ]
    assert len(denied(WORKER, bare)) == len(bare)


def test_worker_cannot_list_secrets_by_path():
    s = Scope()
    ctx = worker_identity(s)
    for path in (secrets_prefix(s.fleet_id), "/linuxbench", f"{secrets_prefix(s.fleet_id)}/{s.instance_ids[0]}"):
        assert evaluate(WORKER, Request("ssm:GetParametersByPath", s.param(path), ctx))[0] == "ExplicitDeny"


def test_worker_cannot_touch_code_or_fleet():
    s = Scope()
    ctx = worker_identity(s)
    assert evaluate(WORKER, Request("s3:PutObject", s.obj(artifact_key(s.code_sha)), ctx))[0] == "ExplicitDeny"
    assert evaluate(WORKER, Request("s3:PutObject", s.obj("artifacts/evil.eval"), ctx))[0] == "ExplicitDeny"
    assert not is_allowed(WORKER, "s3:PutObject", s.obj(manifest_key(s.fleet_id)), ctx)
    assert not is_allowed(WORKER, "s3:GetObject", s.obj(manifest_key(s.fleet_id)), ctx)
    assert not is_allowed(WORKER, "s3:DeleteObject", s.results()[0], ctx)
    assert is_allowed(WORKER, "s3:DeleteObject", s.checkpoint(), ctx)  # its own jobs' checkpoints only
    assert not is_allowed(WORKER, "sqs:DeleteQueue", s.queues("work")[0], ctx)
    assert not is_allowed(WORKER, "sqs:ReceiveMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:payments", ctx)
    for cli in CLI_COMMANDS_EMBEDDED_ONLY:
        assert not is_allowed(WORKER, "ec2:TerminateInstances", s.instance_arn(s.instance_ids[0]), ctx), cli
    assert not is_allowed(WORKER, "ssm:PutParameter", s.param("/linuxbench/worker-ami-id"), ctx)


def test_cli_calls_in_worker_scripts_are_declared():
    pattern = re.compile(
        r"\b(?:ct_aws|aws)\s+(?:\"\$\{args\[@\]\}\"\s+)?(?:--[\w-]+\s+\S+\s+)*([a-z0-9-]+)\s+([a-z0-9-]+)"
    )
    found: dict[tuple[str, str], list[str]] = {}
    scripts = sorted((REPO / "worker").glob("*.sh")) + [
        REPO / "lib" / "bash" / "ct.sh",
        REPO / "lib" / "ct_fleet" / "cloud" / "shims" / "shutdown",
    ]
    for script in scripts:
        for line in script.read_text().splitlines():
            if line.lstrip().startswith("#"):
                continue
            for match in pattern.finditer(line):
                found.setdefault((match.group(1), match.group(2)), []).append(script.name)
    assert ("s3", "cp") in found and ("ssm", "get-parameters") in found, f"the scan finds nothing: {found}"
    undeclared = {k: v for k, v in found.items() if k not in CLI_COMMANDS_DECLARED | set(CLI_COMMANDS_EMBEDDED_ONLY)}
    assert not undeclared, f"AWS CLI calls in worker scripts missing from WORKER_CLI_CALLS: {undeclared}"


# -- size, shape, docs ------------------------------------------------------------------


def test_operator_policy_fits_a_managed_policy():
    size = managed_policy_size(OPERATOR_FILE.read_text())
    assert size <= MANAGED_POLICY_LIMIT, f"{size} characters (whitespace not counted) > {MANAGED_POLICY_LIMIT}"
    assert managed_policy_size(WORKER_FILE.read_text()) <= ROLE_INLINE_LIMIT


@pytest.mark.parametrize("policy", [OPERATOR, WORKER], ids=["operator", "worker"])
def test_policy_shape(policy):
    assert policy["Version"] == "2012-10-17"
    sids = [s["Sid"] for s in policy["Statement"]]
    assert len(sids) == len(set(sids)) and all(re.fullmatch(r"[A-Za-z0-9]+", s) for s in sids)
    for stmt in policy["Statement"]:
        if stmt["Effect"] == "Deny":
            # a Deny on a variable silently does not apply when the variable is missing
            assert "${" not in json.dumps(stmt), f"{stmt['Sid']}: no policy variable in a Deny"


def test_access_doc_lists_every_allowed_action():
    text = ACCESS_DOC.read_text()
    missing = [a for p in (OPERATOR, WORKER) for a in sorted(allowed_actions(p)) if f"`{a}`" not in text]
    assert not missing, f"docs/access.md lacks a table row for {missing}"
    for sid in (*OPERATOR_STATEMENT_EXCEPTIONS, *(s["Sid"] for p in (OPERATOR, WORKER) for s in p["Statement"])):
        assert sid in text, f"docs/access.md does not mention statement {sid}"


# ======================================================================================
# 3. the proof: the calls a real fleet makes
# ======================================================================================


@dataclass
class SmokeRun:
    scope: Scope
    calls: list[tuple[str, int, str]]
    proc: subprocess.CompletedProcess[str]
    run_dir: Path


@pytest.fixture(scope="module")
def smoke_calls(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("iam-proof")
    runs = tmp / "runs"
    log = tmp / "calls.log"
    dotenv = tmp / ".env"
    # Fake keys: only so that per-instance secrets flow (the smoke model is mockllm).
    dotenv.write_text("ANTHROPIC_API_KEY=sk-fake-not-a-key\nGH_TOKEN=ghp-fake-not-a-token\n")
    env = {**os.environ, "CT_FLEET_RUNS": str(runs), "CT_FLEET_API_LOG": str(log), "CT_FLEET_DOTENV": str(dotenv)}
    for key in (
        "AWS_ENDPOINT_URL",
        "AWS_PROFILE",
        "CT_FLEET_ROLE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GH_TOKEN",
    ):
        env.pop(key, None)
    proc = run_cli(
        # max_workers=2 pins what the default (one worker per core) leaves to the machine:
        # the proof needs two instances, to show each reads its own secrets only.
        [
            "eval",
            "--task-file",
            "smoke",
            "--policy",
            "honest",
            "--epochs",
            "1",
            "-T",
            "sandbox=local",
            "--ec2-arg",
            "max_workers=2",
        ],
        env=env,
        timeout=500,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    cfg_fields = {k: v for k, v in manifest["config"].items() if k in Ec2Config.__dataclass_fields__}
    scope = Scope(
        fleet_id=manifest["fleet_id"],
        launched_by=manifest["launched_by"],
        code_sha=manifest["code_sha"],
        instance_ids=sorted(p.name for p in (run_dir / "instances").iterdir()),
        job_ids=[j["job_id"] for j in manifest["jobs"]],
        secret_names=("ANTHROPIC_API_KEY", "GH_TOKEN"),
        config=replace(Ec2Config(), **cfg_fields),
    )
    return SmokeRun(scope, parse_api_log(log.read_text().splitlines()), proc, run_dir)


@pytest.mark.e2e
def test_proof_every_recorded_call_is_allowed(smoke_calls):
    s, calls = smoke_calls.scope, smoke_calls.calls
    assert len(s.instance_ids) >= 2, "the proof needs two instances (own vs other's secrets)"
    by_role: dict[str, set[str]] = {}
    pids: dict[str, set[int]] = {}
    for role, pid, call in calls:
        by_role.setdefault(role, set()).add(call)
        pids.setdefault(role, set()).add(pid)
    assert set(by_role) == {"controller", "worker"}, f"roles in the log: {set(by_role)}"
    assert len(pids["controller"]) == 1 and not pids["controller"] & pids["worker"]
    assert len(pids["worker"]) >= 2, "one job loop per instance"

    # the log worked and shows the protocol
    assert {
        "ec2:CreateFleet",
        "ssm:PutParameter",
        "sqs:SendMessageBatch",
        "sqs:ReceiveMessage",
        "ssm:DeleteParameters",
    } <= by_role["controller"]
    assert {"sqs:ReceiveMessage", "s3:PutObject", "sqs:SendMessageBatch", "sqs:DeleteMessageBatch"} <= by_role["worker"]

    unknown_c = by_role["controller"] - set(CONTROLLER_CALLS) - set(EMBEDDED_ONLY)
    assert not unknown_c, f"controller calls missing from CONTROLLER_CALLS (and docs/access.md): {sorted(unknown_c)}"
    unknown_w = by_role["worker"] - set(WORKER_CALLS)
    assert not unknown_w, f"worker calls missing from WORKER_CALLS (and docs/access.md): {sorted(unknown_w)}"
    stale_c = set(CONTROLLER_CALLS) - by_role["controller"] - NOT_ALWAYS_RECORDED["controller"]
    stale_w = set(WORKER_CALLS) - by_role["worker"] - NOT_ALWAYS_RECORDED["worker"]
    assert not stale_c and not stale_w, f"table entries the code no longer makes: {sorted(stale_c | stale_w)}"

    # every call, with this fleet's names and the context the code builds, is allowed
    check_tables(s)
    # and each worker reads its own secrets, not its neighbour's
    a, b = s.instance_ids[:2]
    assert not denied(WORKER, worker_secret_requests(s, a)) and not denied(WORKER, worker_secret_requests(s, b))
    neighbours = worker_secret_requests(s, a, owner=b)
    assert neighbours and len(denied(WORKER, neighbours)) == len(neighbours)
    # the secrets the controller tagged name the instances the run really launched
    for _arn, tags in secret_puts(s):
        assert tags["aws:ResourceTag/InstanceArn"].rsplit("/", 1)[1] in s.instance_ids


@pytest.mark.e2e
def test_proof_bootstrap_made_the_declared_cli_calls(smoke_calls):
    """The bash steps' CLI calls (declared above, not in the log) really ran on each instance."""
    s, run_dir = smoke_calls.scope, smoke_calls.run_dir
    for instance_id in s.instance_ids:
        home = run_dir / "instances" / instance_id
        # fetch-code.sh: s3 cp of artifacts/<sha>.tar.gz
        assert (home / "opt" / "linuxbench" / ".code-sha").read_text().strip() == s.code_sha
        # fetch-secrets.sh: ssm get-parameters of this instance's own secrets
        log = (home / "var" / "log" / "linuxbench-bootstrap.log").read_text()
        assert f"fetched secrets: {' '.join(sorted(s.secret_names))}" in log, log[-2000:]


# ======================================================================================
# 4. linters
# ======================================================================================

KNOWN_SPLIT_SIDS = {
    "RunInstancesOtherResources",
    "RunInstancesTaggedUser",
    "RunInstancesTaggedSso",
    "CreateFleetOtherResources",
    "CreateFleetTaggedUser",
    "CreateFleetTaggedSso",
    "CreateWorkerSecurityGroupInVpc",
}


def _statement_lines(path: Path) -> dict[int, str]:
    """Line of each statement's opening brace -> its Sid."""
    lines = path.read_text().splitlines()
    out = {}
    for i, line in enumerate(lines):
        m = re.search(r'"Sid":\s*"([^"]+)"', line)
        if m:
            j = i
            while j > 0 and lines[j].strip() != "{":
                j -= 1
            out[j + 1] = m.group(1)
    return out


def _parliament(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "parliament"), *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_parliament_raw_findings_are_only_the_known_false_positives():
    proc = _parliament("--json", "--files", str(WORKER_FILE.relative_to(REPO)))
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr
    proc = _parliament("--json", "--files", str(OPERATOR_FILE.relative_to(REPO)))
    findings = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    sids = _statement_lines(OPERATOR_FILE)
    flagged = {(f["issue"], sids.get(f["location"].get("line"), f"line {f['location'].get('line')}")) for f in findings}
    assert flagged == {("RESOURCE_MISMATCH", sid) for sid in KNOWN_SPLIT_SIDS}, (
        "parliament findings beyond the known split-statement false positives "
        f"(fix the policy, or if it is a false positive document it in policies/parliament.yml): {sorted(flagged)}"
    )
    for f in findings:
        actions = {d["action"] for d in f["detail"]}
        assert actions <= {"ec2:RunInstances", "ec2:CreateSecurityGroup", "ec2:CreateFleet"}, f


def test_parliament_with_config_is_clean():
    proc = _parliament("--config", str(PARLIAMENT_CONFIG), "--files", f"{OPERATOR_FILE},{WORKER_FILE}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not proc.stdout.strip()


@dataclass
class Risk:
    methods: list[str] = field(default_factory=list)  # privilege escalation methods
    actions: set[str] = field(default_factory=set)


def _cloudsplaining(path: Path, *extra: str) -> dict[str, Risk]:
    """Run `cloudsplaining scan-policy-file`; its findings by category (it has no JSON output
    for one file and exits 0 either way, so the text is parsed)."""
    proc = subprocess.run(
        [str(VENV_BIN / "cloudsplaining"), "scan-policy-file", "-i", str(path), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)
    if "There were no results found" in text:
        return {}
    found: dict[str, Risk] = {}
    current: Risk | None = None
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"Potential Issue found: Policy (?:is capable of |allows )(.+)", line)
        if m:
            current = found.setdefault(m.group(1).strip(), Risk())
        elif current is not None and line.startswith("- Method:"):
            current.methods.append(line.split(":", 1)[1].strip())
        elif current is not None and line.startswith("Actions:"):
            current.actions |= {a.strip().lower() for a in line.split(":", 1)[1].split(",") if a.strip()}
    assert found, f"unparsed cloudsplaining output:\n{text}"
    return found


@pytest.mark.parametrize("path", [OPERATOR_FILE, WORKER_FILE], ids=["operator", "worker"])
def test_cloudsplaining_finds_no_unconstrained_risky_action(path):
    # Default scan: risky actions (privilege escalation, exfiltration, exposure, infrastructure
    # modification) on Resource "*" without conditions. Any finding fails.
    assert _cloudsplaining(path) == {}


def test_cloudsplaining_all_risky_actions_are_the_accepted_ones():
    # -aR flags risky actions even when scoped. These are the fleet's job and accepted:
    # RunInstances + PassRole (CreateEC2WithExistingIP) only passes linuxbench-worker,
    # whose rights are the worker policy; CreateQueue (exposure: a queue Policy attribute)
    # only on lb-fleet-* queues. Anything new in these categories fails.
    op = _cloudsplaining(OPERATOR_FILE, "-aR")
    assert op["Privilege Escalation"].methods == ["CreateEC2WithExistingIP"]
    assert op["Privilege Escalation"].actions == {"iam:passrole", "ec2:runinstances"}
    assert op.get("Resource Exposure", Risk()).actions <= {"iam:passrole", "sqs:createqueue"}
    assert not [k for k in op if "ALL Actions" in k]
    wk = _cloudsplaining(WORKER_FILE, "-aR")
    assert "Privilege Escalation" not in wk and "Resource Exposure" not in wk
    assert not [k for k in wk if "ALL Actions" in k]
