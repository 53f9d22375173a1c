"""What EC2 and Service Quotas say that moto never does: capacity errors per pool, quota values.

The fault proxy (faultproxy.py) answers with these for rules of kind "capacity" and
"quota", so real boto3 clients (the controller's) meet them over HTTP:

- capacity, on ec2:CreateFleet: the overrides (pools) whose "<type>@<subnet>" matches the
  rule's `match`, for a fleet of the rule's `market`, are out of capacity. They are taken
  out of the request before moto sees it, and each comes back as an `Errors` entry with
  the rule's `code` (InsufficientInstanceCapacity by default), as EC2 answers an instant
  fleet. With every pool out, moto is not asked: the answer has errors and no instances.
- quota, on servicequotas:GetServiceQuota: the quota whose code matches `match` is
  `value` (moto has none for EC2 and answers NoSuchResourceException).
"""

from __future__ import annotations

import fnmatch
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode
from xml.sax.saxutils import escape

_OVERRIDE = re.compile(r"LaunchTemplateConfigs\.(\d+)\.Overrides\.(\d+)\.(\w+)")


@dataclass
class Rewrite:
    """What to do with one CreateFleet: forward `body` (None: answer `answer` at once) and
    add `errors` (XML items) to moto's answer."""

    body: bytes | None
    errors: str
    answer: bytes = b""


def _error_item(template_id: str, override: dict[str, str], market: str, code: str) -> str:
    fields = "".join(
        f"<{name[0].lower() + name[1:]}>{escape(value)}</{name[0].lower() + name[1:]}>"
        for name, value in override.items()
        if name in ("InstanceType", "SubnetId")
    )
    message = "There is no capacity available for the requested instance type in this Availability Zone."
    if code != "InsufficientInstanceCapacity":
        message = f"{code} (injected by the test's fault proxy)"
    return (
        "<item><launchTemplateAndOverrides><launchTemplateSpecification>"
        f"<launchTemplateId>{escape(template_id)}</launchTemplateId><version>1</version>"
        f"</launchTemplateSpecification><overrides>{fields}</overrides></launchTemplateAndOverrides>"
        f"<lifecycle>{escape(market)}</lifecycle><errorCode>{escape(code)}</errorCode>"
        f"<errorMessage>{escape(message)}</errorMessage></item>"
    )


def capacity(body: bytes, match: str, market: str, code: str) -> Rewrite | None:
    """The CreateFleet request without the pools out of capacity; None: nothing to change."""
    pairs = parse_qsl(body.decode(), keep_blank_values=True)
    form = dict(pairs)
    asked = form.get("TargetCapacitySpecification.DefaultTargetCapacityType", "on-demand")
    if not fnmatch.fnmatchcase(asked, market):
        return None
    overrides: dict[tuple[str, str], dict[str, str]] = {}
    for key, value in pairs:
        found = _OVERRIDE.fullmatch(key)
        if found:
            overrides.setdefault((found.group(1), found.group(2)), {})[found.group(3)] = value
    out = {
        n
        for n, o in overrides.items()
        if fnmatch.fnmatchcase(f"{o.get('InstanceType', '')}@{o.get('SubnetId', '')}", match)
    }
    if not out:
        return None
    template = form.get("LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId", "")
    errors = "".join(_error_item(template, overrides[n], asked, code) for n in sorted(out))
    kept = [n for n in overrides if n not in out]
    if not kept:
        answer = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            f"<requestId>{uuid.uuid4()}</requestId><fleetId>fleet-{uuid.uuid4()}</fleetId>"
            f"<errorSet>{errors}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
        )
        return Rewrite(None, errors, answer.encode())
    renumber = {n: (n[0], str(i + 1)) for i, n in enumerate(kept)}
    rebuilt = []
    for key, value in pairs:
        found = _OVERRIDE.fullmatch(key)
        if not found:
            rebuilt.append((key, value))
            continue
        n = (found.group(1), found.group(2))
        if n in renumber:
            config, index = renumber[n]
            rebuilt.append((f"LaunchTemplateConfigs.{config}.Overrides.{index}.{found.group(3)}", value))
    return Rewrite(urlencode(rebuilt).encode(), errors)


def with_errors(answer: bytes, errors: str) -> bytes:
    """moto's CreateFleet answer with `errors` as its errorSet."""
    text = re.sub(r"<errorSet\s*/>|<errorSet>.*?</errorSet>", "", answer.decode(), flags=re.S)
    return text.replace("</CreateFleetResponse>", f"<errorSet>{errors}</errorSet></CreateFleetResponse>").encode()


def quota(body: bytes, match: str, value: float) -> bytes | None:
    """Service Quotas' answer to GetServiceQuota for a matching quota code; None: not ours."""
    asked: dict[str, Any] = json.loads(body or b"{}")
    code = str(asked.get("QuotaCode", ""))
    if not fnmatch.fnmatchcase(code, match):
        return None
    service = str(asked.get("ServiceCode", "ec2"))
    answer = {
        "Quota": {
            "ServiceCode": service,
            "QuotaCode": code,
            "QuotaArn": f"arn:aws:servicequotas:us-east-1:123456789012:{service}/{code}",
            "QuotaName": f"{code} (the test's fault proxy)",
            "Value": float(value),
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }
    }
    return json.dumps(answer).encode()
