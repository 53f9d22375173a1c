#!/usr/bin/env python
"""launch_pacing: AWS calls per worker launched, and time to reach N workers with EC2 throttling.

Drives the fleet's own launcher (ct_fleet.controller.fleet.launcher.fleet_launcher: the
launch template, then instant CreateFleet batches over every pool) and the per-instance
secrets (services.secrets.put_for_instances, two secrets in one parameter), against a moto server behind
the test suite's fault proxy. Batches are the fleet's: its first launch takes at most 24
workers, later launches (replacements, shortfalls) the rest. Instances are counted, never
booted.

Two runs in the same process, same N: a baseline with no faults, then one where the proxy
answers a share of CreateFleet calls with RequestLimitExceeded (botocore retries them,
adaptive mode). Reported: calls per worker by API (from botocore's before-call events, so
retries count), and the time to N workers as a ratio of the baseline.

Target: every N reached with throttling; calls per worker launched at most 1 CreateFleet
per 24 workers plus its retries, and one SSM PutParameter per worker (all its secrets in
one SecureString).

    .venv/bin/python bench/launch_pacing.py            # N = 50 and 200, 30 % of CreateFleet throttled
    .venv/bin/python bench/launch_pacing.py --quick    # N = 50
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c

sys.path.insert(0, str(c.REPO / "tests"))

from ct_fleet.cloud.moto_server import MotoServer
from ct_fleet.controller.fleet.launcher import fleet_launcher
from ct_fleet.controller.planning import Capacity
from ct_fleet.protocol import Ec2Config
from ct_fleet.services import launching, session
from ct_fleet.services import secrets as fleet_secrets
from testkit.faultproxy import FaultProxy, FaultRule

FIRST_BATCH = 24
SECRETS = {"ANTHROPIC_API_KEY": "a", "GH_TOKEN": "b"}


def _clients(endpoint: str, counts: collections.Counter[str]) -> dict[str, Any]:
    made = {}
    for service in ("ec2", "ssm"):
        client = session.client(
            service,
            region="us-east-1",
            endpoint_url=endpoint,
            access_key_id="testing",
            secret_access_key="testing",
        )
        # Each attempt, retries included: botocore emits before-send per HTTP request.
        client.meta.events.register("before-send.*.*", lambda request, **kw: counts.update([_operation(request)]))
        made[service] = client
    return made


def _operation(request: Any) -> str:
    body = request.body.decode() if isinstance(request.body, bytes) else str(request.body or "")
    target = request.headers.get("X-Amz-Target", b"")
    target = target.decode() if isinstance(target, bytes) else str(target)
    if target:
        return "ssm:" + target.rsplit(".", 1)[-1]
    action = next((p.split("=", 1)[1] for p in body.split("&") if p.startswith("Action=")), "?")
    return "ec2:" + action


def launch(endpoint: str, n: int, fleet_id: str) -> tuple[float, collections.Counter[str], int]:
    """(seconds to N workers, calls by API, workers launched)."""
    counts: collections.Counter[str] = collections.Counter()
    clients = _clients(endpoint, counts)
    ec2, ssm = clients["ec2"], clients["ssm"]
    image = ec2.register_image(Name=f"pacing-{fleet_id}", RootDeviceName="/dev/sda1")["ImageId"]
    cfg = Ec2Config(ami=image, instance_types="c6i.4xlarge,m6i.4xlarge", max_workers=n).for_cloud("aws", "us-east-1")
    pools, vpc = launching.pools_of(ec2, cfg)
    counts.clear()  # what a launch costs, not the set-up of this bench
    start = time.perf_counter()
    launcher = fleet_launcher(ec2, ssm, cfg, Capacity(pools, vpc, n), fleet_id, "bench", "#!/bin/bash\n")
    launched: list[str] = []
    while len(launched) < n:
        batch = min(n - len(launched), FIRST_BATCH)
        got = [g.instance_id for g in launcher.launch(batch)]
        fleet_secrets.put_for_instances(ssm, fleet_id, got, SECRETS, account="123456789012", region="us-east-1")
        launched += got
    elapsed = time.perf_counter() - start
    launch_calls = collections.Counter(counts)  # the teardown below is not a launch's cost
    ec2.terminate_instances(InstanceIds=launched)
    launching.delete_fleet_requests(ec2, fleet_id)
    launching.delete_launch_templates(ec2, fleet_id)
    fleet_secrets.delete_fleet_secrets(ssm, fleet_id)
    return elapsed, launch_calls, len(launched)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--throttle", type=float, default=0.3, help="share of CreateFleet calls throttled")
    args = parser.parse_args()
    sizes = [50] if args.quick else [50, 200]
    print(f"launch_pacing: {c.machine()}")
    ok = True
    with MotoServer(log_path=Path(tempfile.mkdtemp(prefix="ct-bench-pacing-")) / "moto.log") as moto:
        for n in sizes:
            with FaultProxy(moto.endpoint_url, []) as proxy:
                base, base_calls, _ = launch(proxy.endpoint_url, n, f"pace{n:04d}base")
            rules = [FaultRule("ec2:CreateFleet", "throttle", rate=args.throttle)]
            with FaultProxy(moto.endpoint_url, rules, seed=n) as proxy:
                slow, calls, got = launch(proxy.endpoint_url, n, f"pace{n:04d}thrt")
                injected = sum(proxy.injected.values())
            per = {api: count / n for api, count in sorted(calls.items())}
            print(f"  N={n}: baseline {base:.2f} s, throttled {slow:.2f} s ({slow / base:.2f}x), {injected} throttled")
            print(
                "    calls per worker (throttled run, retries included): "
                + ", ".join(f"{k} {v:.3f}" for k, v in per.items())
            )
            print(
                "    baseline calls per worker: " + ", ".join(f"{k} {v / n:.3f}" for k, v in sorted(base_calls.items()))
            )
            batches = -(-n // FIRST_BATCH)
            ok &= got == n and base_calls["ec2:CreateFleet"] == batches
            ok &= base_calls["ssm:PutParameter"] == n
    verdict = "target met" if ok else "TARGET MISSED"
    print(f"launch_pacing: {verdict} (N {', '.join(map(str, sizes))}; every N reached with throttling)")
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
