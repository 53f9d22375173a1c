"""A model-calling agent on the fleet, with --ec2 against moto, and a loopback model API.

An Inspect agent (generate with the bash() tool) written outside the repo runs against
`openai-api/stubai/scripted`: an OpenAI-compatible server started here (tests/testkit/openai_stub.py)
that scripts the tool calls, reports real usage and answers HTTP 429 to every third call.
All samples must complete; tokens must reach the merged log and the final table; the key
and base URL must reach the jobs through per-instance SSM secrets and nowhere else.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
import uuid

import psutil
import pytest
from inspect_ai.log import read_eval_log

from testkit.fleet import ec2_account, fleet_dir, model_stub, run_cli

KEY = "sk-stub-" + uuid.uuid4().hex
MODEL = "openai-api/stubai/scripted"

AGENT = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import bash


@task
def times(n: int = 4):
    samples = [Sample(id=i, input=f"What is {i} times 7?", target=str(i * 7)) for i in range(1, n + 1)]
    return Task(
        dataset=MemoryDataset(samples, name="times"),
        solver=[use_tools(bash()), generate()],
        scorer=includes(),
        sandbox="local",
    )
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory):
    with model_stub(tmp_path_factory.mktemp("stub"), KEY) as running:
        yield running


@pytest.fixture(scope="module")
def account(moto_server, tmp_path_factory: pytest.TempPathFactory, stub):
    runs = tmp_path_factory.mktemp("modelruns")
    made = ec2_account(moto_server.endpoint_url, runs, f"STUBAI_API_KEY={KEY}\nSTUBAI_BASE_URL={stub['base_url']}\n")
    prices = runs.parent / "model-prices.json"
    prices.write_text(json.dumps({"usd_per_million_tokens": {MODEL: {"input": 3.0, "output": 15.0}}}))
    return {**made, "prices": prices}


def _watch(stop: threading.Event, seen: list[str]) -> None:
    while not stop.is_set():
        for proc in psutil.process_iter(["cmdline"]):
            line = " ".join(proc.info["cmdline"] or [])
            if KEY in line:
                seen.append(line)
        time.sleep(0.1)


@pytest.fixture(scope="module")
def model_run(account, tmp_path_factory: pytest.TempPathFactory):
    project = tmp_path_factory.mktemp("agents") / "agents"
    project.mkdir()
    (project / "times.py").write_text(AGENT)
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "STUBAI_API_KEY", "STUBAI_BASE_URL")}
    env.update(
        AWS_ENDPOINT_URL=account["kw"]["endpoint_url"],
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        CT_FLEET_RUNS=str(account["runs"]),
        CT_FLEET_DOTENV=str(account["runs"] / ".env"),
        CT_FLEET_MODEL_PRICES=str(account["prices"]),
        COLUMNS="200",
    )
    cmd = ["eval", "--ec2", f"{project / 'times.py'}@times", "-T", "n=4"]
    cmd += ["--model", MODEL]
    for arg in (
        f"bucket={account['bucket']}",
        f"ami_param={account['param']}",
        "auto_confirm=true",
        "max_workers=1",  # one warm runner's start; the key still reaches it through per-instance SSM
        "concurrency_per_worker=2",
        "idle_timeout=5",
    ):
        cmd += ["--ec2-arg", arg]
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=_watch, args=(stop, seen), daemon=True)
    watcher.start()
    proc = run_cli(cmd, env=env, timeout=900)
    stop.set()
    watcher.join()
    return proc, seen


def _stub_log(stub) -> list[dict]:
    return [json.loads(line) for line in stub["log"].read_text().splitlines()]


@pytest.mark.e2e
def test_the_agent_completes_every_sample_through_429s(model_run, account, stub):
    proc, _ = model_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (merged,) = (fleet_dir(account["runs"]) / "merged").glob("*.eval")
    log = read_eval_log(str(merged))
    assert log.status == "success" and log.eval.model == MODEL
    assert [(s.id, s.epoch) for s in log.samples or []] == [(i, 1) for i in range(1, 5)]
    assert log.results and log.results.scores[0].metrics["accuracy"].value == 1.0
    assert all(any(m.role == "tool" for m in s.messages) for s in log.samples or [])  # the tool was used
    calls = _stub_log(stub)
    assert any(c["status"] == 429 for c in calls) and all(c["key_ok"] for c in calls)


@pytest.mark.e2e
def test_tokens_reach_the_merged_log_and_the_final_table(model_run, account, stub):
    proc, _ = model_run
    assert proc.returncode == 0, proc.stderr
    (merged,) = (fleet_dir(account["runs"]) / "merged").glob("*.eval")
    usage = read_eval_log(str(merged), header_only=True).stats.model_usage[MODEL]
    served = [c["usage"] for c in _stub_log(stub) if c["status"] == 200]
    assert usage.input_tokens == sum(u["prompt_tokens"] for u in served) > 0
    assert usage.output_tokens == sum(u["completion_tokens"] for u in served) > 0
    out = " ".join(proc.stdout.split())
    assert f"model usage: {usage.total_tokens} tokens" in out
    cost = (usage.input_tokens * 3.0 + usage.output_tokens * 15.0) / 1e6
    assert f"model cost ${cost:.4f}" in out or f"model cost ${cost:.2f}" in out
    assert str(usage.total_tokens) in proc.stdout.split("results")[-1]  # the table's tokens column


@pytest.mark.e2e
def test_key_and_base_url_reach_jobs_through_ssm_only(model_run, account, stub):
    proc, seen = model_run
    assert proc.returncode == 0, proc.stderr
    run_dir = fleet_dir(account["runs"])
    # The stub answers only the right key at its own address: 200s mean both reached the job.
    assert any(c["status"] == 200 for c in _stub_log(stub))
    # On the instance they lived in secrets.env, which goes with the instance.
    assert (run_dir / "instances").is_dir()
    assert list((run_dir / "instances").glob("*/etc/linuxbench/secrets.env")) == []
    for path in account["runs"].rglob("*"):
        if path.is_file() and path.name != "secrets.env" and path.name != ".env":
            assert KEY.encode() not in path.read_bytes(), path
    manifest = (run_dir / "manifest.json").read_text()
    assert stub["base_url"] not in manifest and "STUBAI" not in manifest
    s3 = account["client"]("s3")
    for obj in s3.list_objects_v2(Bucket=account["bucket"])["Contents"]:
        body = s3.get_object(Bucket=account["bucket"], Key=obj["Key"])["Body"].read()
        assert KEY.encode() not in body, obj["Key"]
        if obj["Key"].endswith("manifest.json"):
            assert stub["base_url"].encode() not in body
    ec2 = account["client"]("ec2")
    reservations = ec2.describe_instances(Filters=[{"Name": "tag:FleetId", "Values": [run_dir.name]}])["Reservations"]
    instances = [i["InstanceId"] for r in reservations for i in r["Instances"]]
    assert instances
    for instance in instances:
        data = ec2.describe_instance_attribute(InstanceId=instance, Attribute="userData")["UserData"]["Value"]
        text = base64.b64decode(data).decode()
        fleet_env = base64.b64decode(re.search(r"FLEET_ENV='([^']*)'", text).group(1)).decode()
        for shown in (text, fleet_env):
            assert KEY not in shown and stub["base_url"] not in shown
        assert "STUBAI_API_KEY" in fleet_env and "STUBAI_BASE_URL" in fleet_env  # names only: SSM has the values
    assert KEY not in proc.stdout + proc.stderr
    assert seen == []  # never on a command line, in any process
    ssm = account["client"]("ssm")
    left = ssm.get_parameters_by_path(Path="/linuxbench/fleet-secrets", Recursive=True)["Parameters"]
    assert [p["Name"] for p in left if run_dir.name in p["Name"]] == []  # deleted at teardown
