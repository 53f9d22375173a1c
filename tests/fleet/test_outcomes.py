"""How a job's failure is classed and worded, what a run's exit status says, what tokens cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from ct_fleet.controller.planning import models
from ct_fleet.controller.reporting import RunResult, checked_fleet_id, is_local_fleet, local_status, usage
from ct_fleet.errors import BadInput
from ct_fleet.worker import failures


@pytest.mark.parametrize(
    "text,cls",
    [
        ("openai.RateLimitError: Error code: 429 - slow down", "model_api"),
        ("anthropic.APIStatusError: overloaded_error", "model_api"),
        ("openai.AuthenticationError: Error code: 401 - Incorrect API key provided", "fatal"),
        ("openai.NotFoundError: Error code: 404 - The model `gpt-9` does not exist", "fatal"),
        ("openai.BadRequestError: Error code: 400 - invalid_request_error", "fatal"),
        ("ModuleNotFoundError: No module named 'mypkg'", "fatal"),
        ("PrerequisiteError: Groq API requires optional dependencies", "fatal"),
        ("ValueError: Model API nope of model 'nope/x' not recognized.", "fatal"),
        ('  File "x.py", line 404, in f\nConnectionResetError: [Errno 104] reset', "infra"),
        ("botocore.exceptions.EndpointConnectionError: Could not connect", "infra"),
        ("", "infra"),
    ],
)
def test_failures_are_classed_by_what_a_retry_can_do(text: str, cls: str):
    assert failures.classify(text) == cls


def test_error_text_is_the_tail_with_secrets_masked():
    env = {"SECRET_NAMES": "OPENAI_API_KEY SHORT", "OPENAI_API_KEY": "sk-live-0123456789", "SHORT": "ab"}
    secrets = failures.secret_values(env)
    assert secrets == ["sk-live-0123456789"]  # too short a value would mask ordinary text
    output = "\n".join([f"line {i}" for i in range(40)] + ["", "AuthenticationError: bad key sk-live-0123456789"])
    tail = failures.tail(output, secrets)
    assert tail.splitlines()[-1] == "AuthenticationError: bad key ***"
    assert len(tail.splitlines()) == failures.TAIL_LINES and "sk-live" not in tail


def _result(**kw) -> RunResult:
    base = dict(
        fleet_id="f",
        run_dir=Path("."),
        merged=[],
        jobs=0,
        resumed=0,
        workers_launched=0,
        elapsed=0.0,
    )
    return RunResult(**{**base, **kw})


class _Merged:
    def __init__(self, status: str, why: str = "") -> None:
        self.task, self.status, self.why = "t", status, why


def test_a_run_is_ok_only_when_complete_and_successful():
    assert _result(merged=[_Merged("success")]).problems() == []
    assert _result(merged=[_Merged("error", "2 of 12 samples missing: (3, 1), (3, 2)")]).problems() == [
        "t: 2 of 12 samples missing: (3, 1), (3, 2)"
    ]
    rows = [{"dead": True, "error_class": "infra", "error": "lost"}, {"dead": False, "error_class": "fatal"}]
    assert _result(dead_report=rows).problems() == [
        "1 job(s) dead-lettered after every attempt failed",
        "  1 x infra: lost",
        "1 job(s) failed without a result (fatal)",
        "  1 x fatal:",
    ]
    assert _result(stopped_reason="max_cost", unmerged=["qa"]).problems() == ["max_cost", "qa: no results"]


def test_model_cost_uses_inspect_s_price_else_the_repo_table(tmp_path: Path):
    table = {"openai-api/stub/m": {"input": 1.0, "output": 2.0}}
    assert usage.usage_cost("x/y", {"total_cost": 0.5, "input_tokens": 10}, table) == 0.5
    assert usage.usage_cost("openai-api/stub/m", {"input_tokens": 1_000_000, "output_tokens": 500_000}, table) == 2.0
    assert usage.usage_cost("unknown/m", {"input_tokens": 5}, table) is None
    totals = usage.UsageTotals(table=table)
    record = {"openai-api/stub/m": {"input_tokens": 100, "output_tokens": 50, "total_tokens": 150}}
    totals.add("job1", record)
    totals.add("job1", record)  # the same result fetched twice counts once
    totals.add("job2", {"unknown/m": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}})
    assert totals.tokens == 152 and totals.cost == pytest.approx(200 / 1e6) and totals.unpriced == {"unknown/m"}
    assert usage.price_table()  # the repo's table parses


def test_what_a_model_needs_from_the_environment():
    assert models.needs("openai-api/acme/m1", {}).required == (("ACME_API_KEY",), ("ACME_BASE_URL",))
    assert models.needs("openai-api/acme/m1", {"base_url": "http://x"}).required == (("ACME_API_KEY",),)
    need = models.needs("openai/gpt-4o-mini", {})
    assert need.names({"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "u"}) == ["OPENAI_API_KEY", "OPENAI_BASE_URL"]
    assert models.needs("google/gemini-2.0-flash", {}).names({"GEMINI_API_KEY": "k"}) == ["GEMINI_API_KEY"]
    assert models.needs("mockllm/model", {}).required == ()
    with pytest.raises(BadInput, match="write provider/model"):
        models.needs("gpt-4o", {})
    with pytest.raises(BadInput, match="write openai-api/<service>/<model>"):
        models.needs("openai-api/m1", {})
    assert models.forward_names(["A_KEY"], ["HF_TOKEN"], {"HF_TOKEN": "t"}) == ["A_KEY", "HF_TOKEN"]
    with pytest.raises(BadInput, match="AWS credentials never go to workers"):
        models.forward_names([], ["AWS_SECRET_ACCESS_KEY"], {"AWS_SECRET_ACCESS_KEY": "x"})


BOOT_LOG = """2026-12-01T09:12:10Z [bootstrap.sh] step bootstrap: start
2026-12-01T09:12:10Z [docker-login] step docker-login: ok in 4s
2026-12-01T09:12:10Z [settings-pull] step settings-pull: start
2026-12-01T09:12:11Z [settings-pull.sh] installing setting requirements: x.whl
setting toyarena: ready from examples (3 environments)
setting lab: FAILED: setting 'lab' does not import: ModuleNotFoundError: No module named 'x'
2026-12-01T09:12:12Z [settings-pull] step settings-pull: FAILED (exit 1) after 2s
2026-12-01T09:12:12Z [bootstrap.sh] step bootstrap: FAILED (exit 1) after 2s
"""


def test_a_settings_pull_failure_is_reported_with_the_setting_s_line():
    """What the controller stops on: steplog's failed step, with settings-pull's own line."""
    from ct_fleet.controller.fleet import DETERMINISTIC_STEPS
    from ct_fleet.protocol import steplog

    failure = steplog.first_failure(BOOT_LOG)
    assert failure is not None and failure.step.name in DETERMINISTIC_STEPS
    assert failure.describe() == (
        "step settings-pull FAILED (exit 1) after 2s: setting lab: FAILED: setting 'lab' does not import: "
        "ModuleNotFoundError: No module named 'x'"
    )
    fetch = BOOT_LOG.replace("settings-pull", "fetch-code")
    assert steplog.first_failure(fetch).step.name not in DETERMINISTIC_STEPS  # replacing may help there


def test_ec2_by_default_from_the_run_config_or_the_environment(monkeypatch: pytest.MonkeyPatch):
    from ct_fleet.controller.planning import FleetRequest, use_ec2

    monkeypatch.delenv("CT_FLEET_EC2", raising=False)
    assert use_ec2(FleetRequest(), {}) is False
    assert use_ec2(FleetRequest(), {"ec2": True}) is True
    monkeypatch.setenv("CT_FLEET_EC2", "true")
    assert use_ec2(FleetRequest(), {}) is True
    assert use_ec2(FleetRequest(ec2=False), {"ec2": True}) is False  # --no-ec2 wins


def test_a_failed_task_is_fatal_by_the_runner_s_exit_status_whatever_its_text():
    """The runner says the task failed (TASK_FAILED and its summary line); the text then
    only tells the model API's pushback and a machine's faults apart."""
    try:
        try:
            raise KeyError("lab")
        except KeyError as cause:
            raise RuntimeError("slashy/count names 0 tasks, expected one") from cause
    except RuntimeError as exc:
        line = failures.summary_line(exc)
        assert failures.exit_status(exc) == failures.TASK_FAILED
    assert line == "ct-fleet job failed: RuntimeError: slashy/count names 0 tasks, expected one <- KeyError: 'lab'"
    output = (
        f"some inspect output\nTraceback (most recent call last):\n  File x\nRuntimeError: ...\n{line}\natexit noise\n"
    )
    assert failures.classify_exit(failures.TASK_FAILED, output) == ("fatal", line.removeprefix(failures.SUMMARY))
    assert failures.classify("RuntimeError: slashy/count names 0 tasks, expected one") == "infra"  # the old guess
    rate = f"{failures.SUMMARY}RateLimitError: Error code: 429"
    assert failures.classify_exit(failures.TASK_FAILED, rate)[0] == "model_api"
    assert failures.exit_status(OSError(28, "No space left on device")) == 1  # the machine: retried
    assert failures.exit_status(MemoryError()) == 1
    assert failures.classify_exit(-9, "Killed")[0] == "infra"  # no summary: not the task's own failure
    assert failures.classify_exit(failures.TASK_FAILED, "a solver's os._exit(3)")[0] == "infra"  # nor here
    try:
        try:
            raise ExceptionGroup("unhandled errors in a TaskGroup", [ValueError("the real one")])
        except ExceptionGroup:
            raise LookupError("while cleaning up") from None
    except LookupError as exc:
        assert failures.describe(exc) == "LookupError: while cleaning up"
    assert failures.describe(ExceptionGroup("g", [ValueError("the real one")])) == "ValueError: the real one"


def test_a_sandbox_that_cannot_build_names_the_tool_s_cause():
    output = "\n".join(
        [
            "#2 [default internal] load metadata for docker.io/library/nope:1",
            "#2 ERROR: failed to do request: lookup registry-1.docker.io: no such host",
            "failed to solve: nope:1: failed to resolve source metadata: lookup registry-1.docker.io: no such host",
            "Traceback (most recent call last):",
            '  File "compose.py", line 196, in compose_build',
            "inspect_ai._util.error.PrerequisiteError: Failed to build docker containers",
            f"{failures.SUMMARY}PrerequisiteError: Failed to build docker containers",
        ]
    )
    cls, why = failures.classify_exit(failures.TASK_FAILED, output)
    assert cls == "fatal"
    assert why == (
        "PrerequisiteError: Failed to build docker containers: failed to solve: nope:1: failed to resolve "
        "source metadata: lookup registry-1.docker.io: no such host"
    )


def test_many_failures_alike_are_a_few_lines_with_counts():
    """40 errored samples: a line per kind with its count, not 20 repeated reprs."""
    from ct_fleet.error_lines import grouped

    rows = [{"dead": False, "error_class": "fatal", "error": "RuntimeError('boom ' * 50)" * 3} for _ in range(40)]
    rows += [{"dead": False, "error_class": "fatal", "error": f"other {i}"} for i in range(5)]
    problems = _result(dead_report=rows).problems()
    assert problems[0] == "45 job(s) failed without a result (fatal)"
    assert problems[1].startswith("  40 x fatal: RuntimeError") and len(problems[1]) < 300
    assert problems[-1] == "  and 3 more of 3 other kind(s)"
    assert len(problems) == 5
    assert grouped(["a", "b", "a"]) == ["2 x a", "1 x b"]


def test_messages_differing_only_in_ids_are_one_kind():
    """Each worker names itself, each temp dir is new: still one problem, shown by its first."""
    from ct_fleet.error_lines import grouped

    messages = [f"worker i-0{n:016x} died: no space in /tmp/ct-job-{n:07d}x" for n in range(30)]
    messages += [f"job {n:016x} of eval {'Ab3' * 7}{n} sandbox {n:08x}-1111-2222-3333-{n:012x} gone" for n in range(5)]
    messages += ["sample 3 failed", "sample 4 failed"]
    assert grouped(messages) == [
        f"30 x {messages[0]}",
        f"5 x {messages[30]}",
        "1 x sample 3 failed",
        "and 1 more of 1 other kind(s)",
    ]


def test_merged_header_groups_sample_errors():
    from types import SimpleNamespace

    from ct_fleet.merge.header import set_status

    header = SimpleNamespace(eval=SimpleNamespace(config=SimpleNamespace(fail_on_error=None)))
    errors = [(i, 1, "RuntimeError('the sandbox went away: ' + 'x' * 200)") for i in range(40)]
    set_status(header, 40, [], errors)
    assert header.status == "error"
    assert header.error.message.startswith("40 of 40 samples failed: 40 x RuntimeError(")
    assert len(header.error.message) < 400 and header.error.message.count("RuntimeError") == 1


def test_running_never_exceeds_the_workers_slots():
    """SQS counts a job waiting out a retry's backoff as in flight: it is not running."""
    from ct_fleet.controller.fleet.tracker import JobTracker
    from ct_fleet.controller.reporting import progress_of

    state = JobTracker.of([f"j{i}" for i in range(10)])
    kw = dict(total=10, elapsed=1.0, cost=None, tokens=0, model_cost=0.0)
    p = progress_of(state, depths={"work": 2, "work_in_flight": 7}, workers=2, slots=4, **kw)
    assert (p.running, p.queued) == (4, 5)
    p = progress_of(state, depths={"work": 0, "work_in_flight": 8}, workers=0, slots=0, **kw)
    assert (p.running, p.queued) == (0, 8)


def test_the_json_summary_says_failed_with_its_problems_and_the_doc_has_its_schema():
    import json
    import re

    from ct_fleet.controller.reporting import FleetStatus, RunSummary, run_summary

    rows = [{"dead": True, "error_class": "infra", "error": "lost"}]
    summary = run_summary(_result(jobs=3, resumed=1, dead_report=rows))
    assert (summary.outcome, summary.exit_status, summary.jobs_without_result) == ("failed", 1, 1)
    assert summary.problems[0] == "1 job(s) dead-lettered after every attempt failed"
    assert RunSummary.model_validate_json(summary.model_dump_json()) == summary
    doc = (Path(__file__).parents[2] / "docs" / "json.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", doc, re.S)]
    want = [RunSummary.model_json_schema(), FleetStatus.model_json_schema()]
    assert blocks == want, "docs/json.md: paste RunSummary and FleetStatus .model_json_schema() into its json blocks"


def test_a_local_fleet_is_running_while_its_controller_holds_the_lock(tmp_path: Path):
    from ct_fleet.controller.fleet.lease import LocalLock
    from ct_fleet.protocol import Manifest, ManifestJob, ManifestTask, run_layout

    run_dir = tmp_path / "abc123"
    tasks = [ManifestTask(key="k1", name="qa", task_spec="qa.py@qa", task_args={}, sample_ids=[1, 2])]
    tasks.append(ManifestTask(key="k2", name="web", task_spec="web.py@web", task_args={}, sample_ids=[1]))
    jobs = [ManifestJob(job_id=f"j{n}", task=k, sample_id=n, epoch=1) for n, k in ((1, "k1"), (2, "k1"), (3, "k2"))]
    manifest = Manifest(fleet_id="abc123", model="mockllm/model", epochs=1, code_sha="x", tasks=tasks, jobs=jobs)
    run_dir.mkdir()
    (run_dir / run_layout.MANIFEST).write_text(manifest.to_json())
    (run_dir / run_layout.MOTO_LOG).touch()
    run_layout.jobs_dir(run_dir).mkdir()
    run_layout.job_log(run_dir, "j2").touch()
    assert is_local_fleet(run_dir) and not is_local_fleet(tmp_path)
    lock = LocalLock(run_dir)
    lock.acquire()
    try:
        status = local_status(run_dir)
    finally:
        lock.release()
    assert (status.state, status.jobs, status.results, status.left) == ("running", 3, 1, 2)
    assert [(t.task, t.jobs, t.results) for t in status.tasks] == [("qa", 2, 1), ("web", 1, 0)]
    assert local_status(run_dir).state == "incomplete"
    run_layout.job_log(run_dir, "j1").touch()
    run_layout.job_log(run_dir, "j3").touch()
    assert local_status(run_dir).state == "complete"
    with pytest.raises(BadInput, match="is not a fleet id"):
        checked_fleet_id("../etc")
