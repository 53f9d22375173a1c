"""A small IAM policy evaluator, and the map from recorded API calls to what IAM checks.

moto's IAM enforcement checks actions only (no resource ARNs for EC2/SSM, no conditions),
so it cannot prove a scoped policy. This module can, for the subset of the policy language
the fleet's policies use (tests/ec2/test_policies.py proves each policy against the calls the
code really makes):

- Effect Allow/Deny; an explicit Deny wins, then an Allow, else the implicit deny.
- Action/NotAction (case-insensitive wildcards), Resource/NotResource (case-sensitive
  wildcards; ``*`` spans ``/`` and ``:``).
- Condition operators: String{Equals,NotEquals,EqualsIgnoreCase,NotEqualsIgnoreCase,Like,NotLike},
  Arn{Equals,Like,NotEquals,NotLike}, Bool, Null, with ``...IfExists`` and the
  ``ForAllValues:``/``ForAnyValue:`` set qualifiers. Keys in one operator and operators in
  one block are ANDed; the values of one key are ORed.
- Policy variables ``${key}`` in Resource and condition values, ``${key, 'default'}`` and
  the escapes ``${*}``, ``${?}``, ``${$}``. A variable whose key is missing from the request
  makes its condition not match, for negated operators too: a Deny built on a missing
  variable silently does not apply, exactly the trap AWS sets.

Unsupported operators raise: a policy this module cannot read is never silently allowed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

Decision = Literal["Allow", "ExplicitDeny", "ImplicitDeny"]
ContextValue = str | bool | Sequence[str]


@dataclass(frozen=True)
class Request:
    """One authorisation IAM performs: an action on a resource with the request's context."""

    action: str
    resource: str
    context: Mapping[str, ContextValue] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.action} on {self.resource}"


class UnsupportedPolicy(ValueError):
    """The policy uses a construct this evaluator does not implement."""


# -- matching --------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _glob_regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    parts = []
    for ch in pattern:
        if ch == "*":
            parts.append(".*")
        elif ch == "?":
            parts.append(".")
        else:
            parts.append(re.escape(ch))
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def glob_match(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM wildcard match: ``*`` any run of characters (``/`` and ``:`` included), ``?`` one."""
    return _glob_regex(pattern, ignore_case).fullmatch(value) is not None


def arn_match(pattern: str, arn: str) -> bool:
    """ArnLike/ArnEquals: the six ARN fields match one by one (wildcards never cross a colon
    into another field; the last field, the resource, may hold colons)."""
    p_parts = pattern.split(":", 5)
    a_parts = arn.split(":", 5)
    if len(p_parts) != 6 or len(a_parts) != 6:
        return False
    return all(glob_match(p, a) for p, a in zip(p_parts, a_parts, strict=True))


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


# -- policy variables ------------------------------------------------------------------

_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_ESCAPES = {"*": "*", "?": "?", "$": "$"}


class _Unresolved(Exception):
    pass


def _lookup(context: Mapping[str, ContextValue], key: str) -> ContextValue | None:
    """Condition keys are case-insensitive."""
    if key in context:
        return context[key]
    lowered = key.lower()
    for name, value in context.items():
        if name.lower() == lowered:
            return value
    return None


def substitute(text: str, context: Mapping[str, ContextValue]) -> str:
    """Replace ``${key}`` with the request's value; raise _Unresolved when the key is missing."""

    def one(match: re.Match[str]) -> str:
        inner = match.group(1)
        if inner in _ESCAPES:
            return _ESCAPES[inner]
        key, _, default = inner.partition(",")
        value = _lookup(context, key.strip())
        if value is None or isinstance(value, (list, tuple)):
            default = default.strip()
            if default.startswith("'") and default.endswith("'") and len(default) >= 2:
                return default[1:-1]
            raise _Unresolved(key.strip())
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return _VARIABLE.sub(one, text)


def _resolve_all(values: Iterable[Any], context: Mapping[str, ContextValue]) -> tuple[list[str], bool]:
    """(resolved values, whether any value held an unresolvable variable)."""
    out, missing = [], False
    for value in values:
        try:
            out.append(substitute(str(value), context))
        except _Unresolved:
            missing = True
    return out, missing


# -- conditions ------------------------------------------------------------------------


def _string_eq(policy: str, actual: str) -> bool:
    return policy == actual


def _string_eq_ic(policy: str, actual: str) -> bool:
    return policy.lower() == actual.lower()


def _string_like(policy: str, actual: str) -> bool:
    return glob_match(policy, actual)


def _bool_eq(policy: str, actual: str) -> bool:
    return policy.lower() == actual.lower()


# operator -> (value test, negated)
_OPERATORS: dict[str, tuple[Any, bool]] = {
    "StringEquals": (_string_eq, False),
    "StringNotEquals": (_string_eq, True),
    "StringEqualsIgnoreCase": (_string_eq_ic, False),
    "StringNotEqualsIgnoreCase": (_string_eq_ic, True),
    "StringLike": (_string_like, False),
    "StringNotLike": (_string_like, True),
    "ArnEquals": (arn_match, False),
    "ArnLike": (arn_match, False),
    "ArnNotEquals": (arn_match, True),
    "ArnNotLike": (arn_match, True),
    "Bool": (_bool_eq, False),
}


def _context_values(value: ContextValue | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def _condition_matches(operator: str, key: str, policy_values: Any, context: Mapping[str, ContextValue]) -> bool:
    qualifier = ""
    if ":" in operator:
        qualifier, _, operator = operator.partition(":")
        if qualifier not in ("ForAllValues", "ForAnyValue"):
            raise UnsupportedPolicy(f"unknown set qualifier {qualifier}")
    if_exists = operator.endswith("IfExists")
    if if_exists:
        operator = operator[: -len("IfExists")]
    actual = _context_values(_lookup(context, key))

    if operator == "Null":
        wanted = [str(v).lower() for v in _as_list(policy_values)]
        present = actual is not None and len(actual) > 0
        return any((w == "true") != present for w in wanted)

    if operator not in _OPERATORS:
        raise UnsupportedPolicy(f"condition operator {operator} is not implemented")
    test, negated = _OPERATORS[operator]
    values, missing_variable = _resolve_all(_as_list(policy_values), context)
    if missing_variable and (negated or not values):
        # A variable with no value in the request: the condition cannot be evaluated, so it
        # does not match (a Deny written this way silently never applies).
        return False

    if qualifier == "ForAllValues":
        # Every value in the request matches some policy value; vacuously true when absent.
        if not actual:
            return True
        if negated:
            return all(not any(test(v, a) for v in values) for a in actual)
        return all(any(test(v, a) for v in values) for a in actual)
    if qualifier == "ForAnyValue":
        if not actual:
            return False
        if negated:
            return any(not any(test(v, a) for v in values) for a in actual)
        return any(any(test(v, a) for v in values) for a in actual)

    if actual is None:
        # Key absent: IfExists makes the condition true; negated operators match absence.
        return if_exists or negated
    hit = any(test(v, a) for v in values for a in actual)
    return not hit if negated else hit


def conditions_match(condition: Mapping[str, Mapping[str, Any]] | None, context: Mapping[str, ContextValue]) -> bool:
    for operator, keys in (condition or {}).items():
        for key, values in keys.items():
            if not _condition_matches(operator, key, values, context):
                return False
    return True


# -- statements and policies -----------------------------------------------------------


def _action_matches(patterns: Iterable[str], action: str) -> bool:
    return any(glob_match(p, action, ignore_case=True) for p in patterns)


def _resource_matches(patterns: Iterable[str], resource: str, context: Mapping[str, ContextValue]) -> bool:
    for pattern in patterns:
        try:
            resolved = substitute(pattern, context)
        except _Unresolved:
            continue
        if glob_match(resolved, resource):
            return True
    return False


def statement_applies(stmt: Mapping[str, Any], request: Request) -> bool:
    if "Action" in stmt:
        if not _action_matches(_as_list(stmt["Action"]), request.action):
            return False
    elif "NotAction" in stmt:
        if _action_matches(_as_list(stmt["NotAction"]), request.action):
            return False
    else:
        raise UnsupportedPolicy(f"statement {stmt.get('Sid', '?')} has neither Action nor NotAction")
    if "Resource" in stmt:
        if not _resource_matches(_as_list(stmt["Resource"]), request.resource, request.context):
            return False
    elif "NotResource" in stmt:
        if _resource_matches(_as_list(stmt["NotResource"]), request.resource, request.context):
            return False
    else:
        raise UnsupportedPolicy(f"statement {stmt.get('Sid', '?')} has neither Resource nor NotResource")
    return conditions_match(stmt.get("Condition"), request.context)


def statements(policy: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return _as_list(policy.get("Statement"))


def evaluate(policies: Mapping[str, Any] | Sequence[Mapping[str, Any]], request: Request) -> tuple[Decision, list[str]]:
    """Decide one request against identity policies; returns (decision, Sids that decided it)."""
    docs = [policies] if isinstance(policies, Mapping) else list(policies)
    allows, denies = [], []
    for doc in docs:
        for i, stmt in enumerate(statements(doc)):
            if statement_applies(stmt, request):
                sid = str(stmt.get("Sid", f"#{i}"))
                (denies if stmt.get("Effect") == "Deny" else allows).append(sid)
    if denies:
        return "ExplicitDeny", denies
    if allows:
        return "Allow", allows
    return "ImplicitDeny", []


def is_allowed(
    policies: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    action: str,
    resource: str,
    context: Mapping[str, ContextValue] | None = None,
) -> bool:
    return evaluate(policies, Request(action, resource, context or {}))[0] == "Allow"


def allowed_actions(policy: Mapping[str, Any]) -> set[str]:
    """Actions named in the policy's Allow statements (as written; wildcards stay patterns)."""
    out: set[str] = set()
    for stmt in statements(policy):
        if stmt.get("Effect") == "Allow":
            if "NotAction" in stmt:
                raise UnsupportedPolicy("an Allow with NotAction cannot be listed")
            out.update(_as_list(stmt.get("Action")))
    return out


def managed_policy_size(text: str) -> int:
    """Characters IAM counts against a policy's size quota: whitespace is not counted."""
    return len(re.sub(r"\s", "", text))


MANAGED_POLICY_LIMIT = 6144
ROLE_INLINE_LIMIT = 10240
USER_INLINE_LIMIT = 2048


# -- recorded calls -> IAM actions ------------------------------------------------------

# The log written with CT_FLEET_API_LOG names boto3 operations ("service:Operation"); IAM
# authorises actions that are often named differently. None: the call needs no permission.
CALL_ACTIONS: dict[str, tuple[str, ...] | None] = {
    "sts:GetCallerIdentity": None,
    # S3: API operation -> IAM action
    "s3:HeadBucket": ("s3:ListBucket",),
    "s3:ListObjects": ("s3:ListBucket",),
    "s3:ListObjectsV2": ("s3:ListBucket",),
    "s3:HeadObject": ("s3:GetObject",),
    "s3:GetObject": ("s3:GetObject",),
    "s3:PutObject": ("s3:PutObject",),
    "s3:CreateMultipartUpload": ("s3:PutObject",),
    "s3:UploadPart": ("s3:PutObject",),
    "s3:CompleteMultipartUpload": ("s3:PutObject",),
    "s3:AbortMultipartUpload": ("s3:AbortMultipartUpload",),
    "s3:CopyObject": ("s3:GetObject", "s3:PutObject"),
    "s3:DeleteObject": ("s3:DeleteObject",),
    "s3:DeleteObjects": ("s3:DeleteObject",),
    "s3:CreateBucket": ("s3:CreateBucket",),
    # SQS: a batch call is authorised as its single-message action
    "sqs:SendMessageBatch": ("sqs:SendMessage",),
    "sqs:DeleteMessageBatch": ("sqs:DeleteMessage",),
    "sqs:ChangeMessageVisibilityBatch": ("sqs:ChangeMessageVisibility",),
    # Service Quotas: boto3's service name differs from IAM's prefix
    "service-quotas:GetServiceQuota": ("servicequotas:GetServiceQuota",),
}

# Services whose boto3 operation names are their IAM action names (for the calls we make).
SAME_NAME_SERVICES = ("ec2", "sqs", "ssm", "iam", "ec2-instance-connect")

# EC2 calls that tag what they create, and the resources they tag.
TAG_ON_CREATE = {
    "ec2:RunInstances": ("instance/", "volume/"),
    "ec2:CreateSecurityGroup": ("security-group/",),
    "ec2:CreateFleet": ("fleet/",),
    "ec2:CreateLaunchTemplate": ("launch-template/",),
}

# IAM actions on the bucket rather than on an object.
S3_BUCKET_ACTIONS = {"s3:ListBucket", "s3:CreateBucket", "s3:DeleteBucket", "s3:GetBucketLocation"}

# AWS CLI commands of the worker scripts -> boto-style calls (s3 cp: a download heads then gets).
CLI_CALLS: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {
    ("s3", "cp"): {"download": ("s3:HeadObject", "s3:GetObject"), "upload": ("s3:PutObject",)},
    ("ssm", "get-parameters"): {"": ("ssm:GetParameters",)},
    ("ssm", "get-parameter"): {"": ("ssm:GetParameter",)},
    ("ec2", "terminate-instances"): {"": ("ec2:TerminateInstances",)},
}


class UnknownCall(KeyError):
    """A recorded call with no known IAM mapping: add it to CALL_ACTIONS."""


def iam_actions(call: str) -> tuple[str, ...]:
    """IAM actions one recorded call needs (empty: none)."""
    if call in CALL_ACTIONS:
        return CALL_ACTIONS[call] or ()
    service, _, operation = call.partition(":")
    if service in SAME_NAME_SERVICES and operation and not operation.endswith("Batch"):
        return (call,)
    raise UnknownCall(call)


def bucket_arn(s3_arn: str) -> str:
    """arn:aws:s3:::bucket/key -> arn:aws:s3:::bucket."""
    prefix = "arn:aws:s3:::"
    if not s3_arn.startswith(prefix):
        raise ValueError(f"not an S3 ARN: {s3_arn}")
    return prefix + s3_arn[len(prefix) :].split("/", 1)[0]


def _request_tags(context: Mapping[str, ContextValue]) -> bool:
    return any(k.lower().startswith("aws:requesttag/") for k in context)


def requests_for_call(
    call: str,
    resources: Sequence[str],
    context: Mapping[str, ContextValue] | None = None,
    *,
    passed_role: str | None = None,
    resource_context: Mapping[str, Mapping[str, ContextValue]] | None = None,
) -> list[Request]:
    """Every authorisation IAM performs for one API call on the given resources.

    Besides the call's own actions, this adds what AWS checks alongside:
    - ec2 calls that tag what they create (TAG_ON_CREATE): ec2:CreateTags on each tagged
      resource with ec2:CreateAction set to the operation (tag-on-create);
    - ec2:RunInstances with an instance profile: iam:PassRole on its role, passed to EC2;
    - ssm:PutParameter with tags: ssm:AddTagsToResource on the parameter;
    - s3 HeadObject/GetObject: s3:ListBucket on the bucket, without which a missing key is a
      403 instead of the 404 that store.py treats as "not there".
    resource_context adds keys that depend on the resource (its tags: aws:ResourceTag/X).
    """
    ctx = dict(context or {})
    per_resource = resource_context or {}
    out: list[Request] = []

    def add(action: str, resource: str, extra: Mapping[str, ContextValue] | None = None) -> None:
        merged = {**ctx, **per_resource.get(resource, {}), **(extra or {})}
        out.append(Request(action, resource, merged))

    for action in iam_actions(call):
        for resource in resources:
            add(action, bucket_arn(resource) if action in S3_BUCKET_ACTIONS else resource)

    operation = call.partition(":")[2]
    if call in TAG_ON_CREATE and _request_tags(ctx):
        taggable = TAG_ON_CREATE[call]
        for resource in resources:
            if any(kind in resource for kind in taggable):
                add("ec2:CreateTags", resource, {"ec2:CreateAction": operation})
    if call == "ec2:RunInstances" and passed_role:
        add("iam:PassRole", passed_role, {"iam:PassedToService": "ec2.amazonaws.com"})
    if call == "ssm:PutParameter" and _request_tags(ctx):
        for resource in resources:
            add("ssm:AddTagsToResource", resource)
    if call in ("s3:HeadObject", "s3:GetObject"):
        for bucket in dict.fromkeys(bucket_arn(r) for r in resources):
            add("s3:ListBucket", bucket)
    return out


def denied(
    policies: Mapping[str, Any] | Sequence[Mapping[str, Any]], requests: Iterable[Request]
) -> list[tuple[Request, Decision]]:
    """The requests the policies do not allow, with the reason."""
    out = []
    for request in requests:
        decision, _ = evaluate(policies, request)
        if decision != "Allow":
            out.append((request, decision))
    return out


def parse_api_log(lines: Iterable[str]) -> list[tuple[str, int, str]]:
    """Lines "<pid> <service>:<Operation> [<role>]" -> (role, pid, call); role defaults to controller."""
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) < 2:
            continue
        role = parts[2] if len(parts) > 2 else "controller"
        out.append((role, int(parts[0]), parts[1]))
    return out
