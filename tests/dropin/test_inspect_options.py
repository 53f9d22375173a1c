"""`ct-fleet eval` takes every option of the installed Inspect's `inspect eval`.

Each option either reaches every job's eval() call with its value (parsed by Inspect's
own parsers), or has a fleet meaning, or is refused with its reason in one line, exit 2.
The table is Inspect's own parameter list: an option Inspect gains that ct-fleet does not
account for fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from ct_fleet import inspect_options
from ct_fleet.cli.eval_cmd import _inspect_options, build_eval_command
from ct_fleet.cli.main import cli
from ct_fleet.controller.planning import inspect_request
from ct_fleet.errors import BadInput
from testkit.task_files import NO_MODEL_CALL

INSPECT = inspect_options.inspect_eval_params()
COMMAND = build_eval_command()


def _options(*args: str) -> dict[str, Any]:
    """The Inspect options `ct-fleet eval TASK ARGS` hands the planner."""
    ctx = COMMAND.make_context("eval", ["task.py", *args])
    known = {p.name for p in INSPECT} - set(("tasks", "model", "m", "t", "limit", "sample_id", "epochs"))
    values = {name: value for name, value in ctx.params.items() if name in known}
    return _inspect_options(ctx, values)


def test_every_inspect_option_is_accounted_for():
    names = [p.name for p in INSPECT]
    assert len(names) > 100  # Inspect's command, not an empty list
    assert inspect_options.unhandled(names) == []
    stale = set(inspect_options.HANDLING) - set(names)
    assert not stale, f"HANDLING names options Inspect no longer has: {sorted(stale)}"


def test_no_inspect_option_is_unknown_to_ct_fleet_eval():
    ours = {opt for p in COMMAND.params for opt in (*p.opts, *p.secondary_opts)}
    theirs = {opt for p in INSPECT if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}
    assert len(theirs) > 100
    assert sorted(theirs - ours) == []


# An example command line for every option a job takes, and what its eval() gets for it.
JOB_EXAMPLES: dict[str, tuple[list[str], str, Any]] = {
    "generate_config": (["--generate-config", "{gen}"], "temperature", 0.25),
    "max_retries": (["--max-retries", "3"], "max_retries", 3),
    "timeout": (["--timeout", "30"], "timeout", 30),
    "attempt_timeout": (["--attempt-timeout", "20"], "attempt_timeout", 20),
    "stream_idle_timeout": (["--stream-idle-timeout", "9"], "stream_idle_timeout", 9),
    "max_tokens": (["--max-tokens", "64"], "max_tokens", 64),
    "system_message": (["--system-message", "be brief"], "system_message", "be brief"),
    "best_of": (["--best-of", "2"], "best_of", 2),
    "frequency_penalty": (["--frequency-penalty", "0.5"], "frequency_penalty", 0.5),
    "presence_penalty": (["--presence-penalty", "0.5"], "presence_penalty", 0.5),
    "logit_bias": (["--logit-bias", "42=10"], "logit_bias", {42: 10.0}),
    "seed": (["--seed", "7"], "seed", 7),
    "stop_seqs": (["--stop-seqs", "a,b"], "stop_seqs", ["a", "b"]),
    "temperature": (["--temperature", "0"], "temperature", 0.0),
    "top_p": (["--top-p", "0.9"], "top_p", 0.9),
    "top_k": (["--top-k", "5"], "top_k", 5),
    "num_choices": (["--num-choices", "2"], "num_choices", 2),
    "logprobs": (["--logprobs"], "logprobs", True),
    "top_logprobs": (["--top-logprobs", "3"], "top_logprobs", 3),
    "prompt_logprobs": (["--prompt-logprobs", "2"], "prompt_logprobs", 2),
    "parallel_tool_calls": (["--no-parallel-tool-calls"], "parallel_tool_calls", False),
    "internal_tools": (["--no-internal-tools"], "internal_tools", False),
    "max_tool_output": (["--max-tool-output", "1000"], "max_tool_output", 1000),
    "cache_prompt": (["--cache-prompt", "true"], "cache_prompt", True),
    "fallback_models": (["--fallback-models", "a/b, c/d"], "fallback_models", ["a/b", "c/d"]),
    "fail_on_refusal": (["--fail-on-refusal"], "fail_on_refusal", True),
    "verbosity": (["--verbosity", "low"], "verbosity", "low"),
    "effort": (["--effort", "high"], "effort", "high"),
    "reasoning_effort": (["--reasoning-effort", "low"], "reasoning_effort", "low"),
    "reasoning_mode": (["--reasoning-mode", "pro"], "reasoning_mode", "pro"),
    "reasoning_tokens": (["--reasoning-tokens", "100"], "reasoning_tokens", 100),
    "reasoning_summary": (["--reasoning-summary", "auto"], "reasoning_summary", "auto"),
    "reasoning_history": (["--reasoning-history", "last"], "reasoning_history", "last"),
    "response_schema": (
        ["--response-schema", '{"name": "s", "json_schema": {"type": "object"}}'],
        "response_schema",
        "s",
    ),
    "extra_headers": (["--extra-headers", '{X-A: "1"}'], "extra_headers", {"X-A": "1"}),
    "extra_body": (["--extra-body", '{"k": 1}'], "extra_body", {"k": 1}),
    "cache": (["--cache", "2h"], "cache", "2h"),
    "batch": (["--batch", "50"], "batch", 50),
    "modalities": (["--modalities", "text"], "modalities", ["text"]),
    "max_connections": (["--max-connections", "4"], "max_connections", 4),
    "adaptive_connections": (["--adaptive-connections", "4-80"], "adaptive_connections", 80),
    "checkpoint": (["--checkpoint", "turn:3"], "checkpoint", 3),
    "model_base_url": (["--model-base-url", "http://x/v1"], "model_base_url", "http://x/v1"),
    "model_role": (["--model-role", "grader=mockllm/model"], "model_roles", {"grader": "mockllm/model"}),
    "solver": (["--solver", "s.py@s"], "solver", "s.py@s"),
    "s": (["--solver", "s.py@s", "-S", "k=2"], "solver", {"k": 2}),
    "solver_config": (["--solver", "s.py@s", "--solver-config", "{solver}"], "solver", {"k": 3}),
    "tags": (["--tags", "a,b"], "tags", ["a", "b"]),
    "metadata": (["--metadata", "owner=me"], "metadata", {"owner": "me"}),
    "approval": (["--approval", "{approval}"], "approval", "human"),
    "review": (["--review", "mypkg/review_policy"], "review", "mypkg/review_policy"),
    "sentinel": (["--sentinel", "mon"], "sentinel", "mon"),
    "sentinel_arg": (["--sentinel", "mon", "--sentinel-arg", "k=1"], "sentinel", {"k": 1}),
    "no_sandbox_cleanup": (["--no-sandbox-cleanup"], "sandbox_cleanup", False),
    "sandbox_prebuilt": (["--sandbox-prebuilt"], "sandbox_prebuilt", True),
    "epochs_reducer": (["--epochs-reducer", "max"], "epochs", ["max"]),
    "no_epochs_reducer": (["--no-epochs-reducer"], "epochs", []),
    "max_subprocesses": (["--max-subprocesses", "3"], "max_subprocesses", 3),
    "max_dataset_memory": (["--max-dataset-memory", "64"], "max_dataset_memory", 64),
    "message_limit": (["--message-limit", "10"], "message_limit", 10),
    "token_limit": (["--token-limit", "output:1k"], "token_limit", "output"),
    "turn_limit": (["--turn-limit", "4"], "turn_limit", 4),
    "cost_limit": (["--cost-limit", "1.5"], "cost_limit", 1.5),
    "model_cost_config": (["--model-cost-config", "{costs}"], "model_cost_config", {"a/b": {"input": 1.0}}),
    "time_limit": (["--time-limit", "60"], "time_limit", 60),
    "working_limit": (["--working-limit", "30"], "working_limit", 30),
    "fail_on_error": (["--fail-on-error", "0.2"], "fail_on_error", 0.2),
    "no_fail_on_error": (["--no-fail-on-error"], "fail_on_error", False),
    "continue_on_fail": (["--continue-on-fail"], "continue_on_fail", True),
    "retry_on_error": (["--retry-on-error", "2"], "retry_on_error", 2),
    "score_on_error": (["--score-on-error"], "score_on_error", True),
    "no_log_realtime": (["--no-log-realtime"], "log_realtime", False),
    "log_images": (["--no-log-images"], "log_images", False),
    "log_model_api": (["--log-model-api"], "log_model_api", True),
    "log_refusals": (["--log-refusals"], "log_refusals", True),
    "log_buffer": (["--log-buffer", "5"], "log_buffer", 5),
    "log_shared": (["--log-shared", "20"], "log_shared", 20),
    "no_score": (["--no-score"], "score", False),
    "no_score_display": (["--no-score-display"], "score_display", False),
    "log_level": (["--log-level", "info"], "log_level", "info"),
    "log_level_transcript": (["--log-level-transcript", "debug"], "log_level_transcript", "debug"),
    "debug_errors": (["--debug-errors"], "debug_errors", True),
}


def _shown(kwarg: str, value: Any) -> Any:
    """What of an eval() argument the examples name (objects by their telling part)."""
    if kwarg == "epochs":
        return [r.__registry_info__.name if hasattr(r, "__registry_info__") else str(r) for r in value.reducer or []]
    if kwarg == "solver":
        return value.solver if not value.args else value.args
    if kwarg == "checkpoint":
        return value.trigger.every
    if kwarg == "token_limit":
        return value.type
    if kwarg == "response_schema":
        return value.name
    if kwarg == "adaptive_connections":
        return value.max
    if kwarg == "cache":
        return value.expiry
    if kwarg == "batch":
        return value if isinstance(value, int) else value.size
    if kwarg == "sentinel" and not isinstance(value, str):
        return value.root.params
    if kwarg == "approval" and not isinstance(value, str):
        return value.approvers[0].name
    return value


def test_every_job_option_has_an_example():
    job = {name for name, h in inspect_options.HANDLING.items() if h.kind == "job"}
    assert job - set(JOB_EXAMPLES) == set()


@pytest.mark.parametrize("name", sorted(JOB_EXAMPLES))
def test_a_job_option_reaches_the_jobs_eval_call(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    args, kwarg, expected = JOB_EXAMPLES[name]
    files = {
        "gen": ("gen.yaml", "temperature: 0.25\n"),
        "solver": ("solver.yaml", "k: 3\n"),
        "approval": ("approval.yaml", "approvers:\n  - name: human\n    tools: '*'\n"),
        "costs": ("costs.yaml", "a/b:\n  input: 1.0\n  output: 2.0\n"),
    }
    for file, text in files.values():
        (tmp_path / file).write_text(text)
    monkeypatch.chdir(tmp_path)
    for key, (file, _) in files.items():
        args = [a.replace("{" + key + "}", file) for a in args]
    options = _options(*args)
    assert name in options or name == "s" or name.startswith("no_")
    # It travels to workers as JSON, config files read here (a worker has no such file).
    sent = inspect_options.job_options(options)
    assert ".yaml" not in repr(sent)
    kwargs = inspect_options.eval_kwargs(sent)
    assert kwarg in kwargs, f"{args} did not reach eval(): {sorted(kwargs)}"
    shown = _shown(kwarg, kwargs[kwarg])
    if kwarg == "model_cost_config":
        shown = {k: {"input": v["input"]} for k, v in shown.items()}
    assert shown == expected


def test_without_options_a_job_gets_what_inspect_eval_gives():
    kwargs = inspect_options.eval_kwargs(inspect_options.job_options(_options()))
    # the CLI's own defaults for eval(): what a direct `inspect eval` records too
    assert kwargs["epochs"] == 1 and kwargs["log_shared"] == 0 and kwargs["log_level"] == "warning"
    assert "temperature" not in kwargs and "solver" not in kwargs


@pytest.mark.parametrize(
    "name", sorted(n for n, h in inspect_options.HANDLING.items() if h.kind == "refused" and n != "debug_port")
)
def test_a_refused_option_says_why_in_one_line_and_exits_2(name: str, tmp_path: Path):
    param = next(p for p in INSPECT if p.name == name)
    flag = param.opts[-1]
    needs_value = (
        isinstance(param, click.Option) and not param.is_flag and not getattr(param, "_flag_needs_value", False)
    )
    args = ["eval", "task.py", flag, *(["1"] if needs_value else [])]
    result = CliRunner().invoke(cli, args, env={"CT_FLEET_RUNS": str(tmp_path)})
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}:"), result.output
    assert inspect_options.HANDLING[name].note in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_refused_option_in_inspects_environment_is_not_this_commands_request(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("INSPECT_EVAL_TRACE", "1")  # set for direct runs
    assert "trace" not in _options()


def test_options_are_read_from_inspects_environment_variables(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("INSPECT_EVAL_TEMPERATURE", "0.5")
    monkeypatch.setenv("INSPECT_EVAL_MODEL", "openai/a,openai/b")
    ctx = COMMAND.make_context("eval", ["task.py"])
    assert ctx.params["models"] == ("openai/a,openai/b",)
    assert _options()["temperature"] == 0.5


def test_fleet_options_get_their_fleet_meaning(tmp_path: Path):
    asked = inspect_request.read(
        _options(
            "--log-dir", str(tmp_path / "logs"), "--log-format", "json", "--max-samples", "3", "--max-sandboxes", "2"
        )
    )
    assert asked.log_dir == tmp_path / "logs" and asked.log_format == "json"
    assert asked.worker_cap == 2  # samples at once per worker
    assert "log_dir" not in asked.job_options and "max_samples" not in asked.job_options
    assert inspect_request.read(_options()).log_dir is None  # Inspect's default ./logs is not asked for


@pytest.mark.parametrize("args,shuffle", [([], None), (["--sample-shuffle", "5"], 5), (["--sample-shuffle"], True)])
def test_sample_shuffle_shuffles_before_the_selection_not_in_a_job(args: list[str], shuffle: Any):
    asked = inspect_request.read(_options(*args))
    assert asked.sample_shuffle == shuffle
    # a job names its one sample: Inspect refuses sample_id with sample_shuffle
    assert "sample_shuffle" not in inspect_options.eval_kwargs(asked.job_options)


def test_task_and_model_config_files_are_task_and_model_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    Path("t.yaml").write_text("level: 2\n")
    Path("m.json").write_text('{"base_url": "http://x"}')
    asked = inspect_request.read(_options("--task-config", "t.yaml", "--model-config", "m.json"))
    assert asked.task_args == {"level": 2} and asked.model_args == {"base_url": "http://x"}
    with pytest.raises(BadInput, match="--task-config nope.yaml: no such file"):
        inspect_request.read(_options("--task-config", "nope.yaml"))


def test_run_config_plans_the_fleet_and_reaches_the_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    Path("run.yaml").write_text(
        "task: {task: t.py@t, args: {n: 3}}\nmodel: openai/a\n"
        "generate_config: {temperature: 0.7}\neval_config: {epochs: 4, epochs_reducer: [max], message_limit: 9}\n"
    )
    asked = inspect_request.read(_options("--run-config", "run.yaml"))
    assert asked.run_tasks == ["t.py@t"] and asked.run_model == "openai/a" and asked.run_epochs == 4
    assert asked.task_args == {"n": 3}
    kwargs = inspect_options.eval_kwargs(asked.job_options)
    assert kwargs["temperature"] == 0.7 and kwargs["message_limit"] == 9
    assert kwargs["epochs"].epochs == 1  # a job runs one epoch; the fleet runs the run config's 4
    # the command line wins over the file, as with inspect eval --run-config
    assert (
        inspect_options.eval_kwargs(
            inspect_request.read(_options("--run-config", "run.yaml", "--temperature", "0.1")).job_options
        )["temperature"]
        == 0.1
    )


def test_inspects_parsers_refuse_what_inspect_refuses():
    for args, said in (
        (["--epochs-reducer", "nonesuch"], "nonesuch"),
        (["--model-role", "grader={model: x"], "--model-role"),
        (["-S", "k=1"], "need --solver"),
        (["--checkpoint", "turn:x"], "turn"),
    ):
        with pytest.raises(BadInput, match=said):
            inspect_request.read(_options(*args))


def _direct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, list[Any]]:
    """`inspect eval t.py --model mockllm/model ARGS` in this process (Inspect's own command):
    its exit status and the logs it wrote."""
    from inspect_ai.log import list_eval_logs, read_eval_log

    from ct_fleet.inspect_private import inspect_eval_command

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(NO_MODEL_CALL)
    logs = tmp_path / "logs"
    result = CliRunner().invoke(
        inspect_eval_command,
        ["t.py", "--model", "mockllm/model", *args, "--log-dir", str(logs), "--display", "none"],
    )
    return result.exit_code, [read_eval_log(info.name) for info in list_eval_logs(str(logs))]


@pytest.mark.parametrize(
    "value",
    [
        "grader=mockllm/a",
        "grader=mockllm/a,mockllm/b",
        "grader={model: mockllm/a, temperature: 0.5}",
        "grader={model: mockllm/a, model_args: {}}",
        '{"grader": {"model": "mockllm/a", "seed": 3}}',
        "grader=",
        "grader=5",
        "grader=[]",
        "grader={model: mockllm/a, temprature: 0.5}",
        "grader={model: mockllm/a, model_args: 3}",
        "grader={model: mockllm/a",
    ],
)
def test_a_model_role_is_refused_exactly_when_inspect_eval_refuses_it(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Read without building the role's model (its key may be one only workers get), and
    judged as Inspect's own command judges it."""
    status, logs = _direct(tmp_path, monkeypatch, "--model-role", value)
    inspect_runs = status == 0 and [log.status for log in logs] == ["success"]
    try:
        inspect_request.read(_options("--model-role", value))
        refused = ""
    except BadInput as exc:
        refused = str(exc)
    assert (not refused) == inspect_runs, (value, status, refused)
    assert "--model-role" in refused or not refused


@pytest.mark.parametrize(
    "args,says",
    [
        (["--message-limit", "-1"], "Message limit value must be a non-negative integer"),
        (["--turn-limit", "-2"], "Turn limit value must be a non-negative integer"),
        (["--working-limit", "-1"], "Working time limit value must be a non-negative float"),
    ],
)
def test_a_limit_inspect_takes_but_cannot_run_is_refused_with_its_reason(
    args: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Inspect's command line takes a negative limit and its run then fails every sample on
    it (exit 0, an error log): on a fleet that is a fleet of failed jobs, so it is bad input.
    (--cost-limit: tests/dropin/test_model_roles.py, where the models have prices.)"""
    _, (log,) = _direct(tmp_path, monkeypatch, *args)
    assert log.status == "error" and log.error is not None and says in log.error.message
    with pytest.raises(BadInput, match=f"^{args[0]} .*{says}"):
        inspect_request.read(_options(*args))
    inspect_request.read(_options(args[0], "0"))  # no limit at all is Inspect's 0, taken


@pytest.mark.parametrize("name", ["--max-connections", "--max-subprocesses"])
def test_a_count_of_nothing_at_once_is_refused(name: str):
    """Inspect waits forever for a connection (or subprocess) slot that never comes."""
    with pytest.raises(BadInput, match=f"^{name} 0: give a count of 1 or more"):
        inspect_request.read(_options(name, "0"))
    assert inspect_request.read(_options(name, "1")).job_options[name[2:].replace("-", "_")] == 1


@pytest.mark.parametrize(
    "args,says",
    [
        (["--sample-id", "1", "--sample-shuffle"], "use either --sample-id or --sample-shuffle"),
        (["--log-shared", "--log-format", "json"], "--log-shared is not compatible with --log-format json"),
    ],
)
def test_options_inspect_refuses_together_are_refused_together(
    args: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    status, logs = _direct(tmp_path, monkeypatch, *args)
    assert status != 0 and not logs
    inspect_request.read(_options("--log-shared"))  # alone, each is taken
    inspect_request.read(_options("--log-format", "json"))
    runs = tmp_path / "runs"
    result = CliRunner().invoke(cli, ["eval", "t.py", *args], env={"CT_FLEET_RUNS": str(runs)})
    assert result.exit_code == 2 and says in result.output, result.output
    assert not runs.exists()


@pytest.mark.parametrize(
    "values,envs,variables",
    [
        (["web"], ["web"], {}),
        (["toyarena:web", "lab"], ["toyarena:web", "lab"], {}),
        (["FOO=bar", "web", "X=a=b"], ["web"], {"FOO": "bar", "X": "a=b"}),
        (["FLAG=on", "N=007"], [], {"FLAG": "True", "N": "7"}),  # read as YAML, as inspect eval --env does
    ],
)
def test_env_takes_a_settings_env_or_inspects_name_value(values, envs, variables):
    assert inspect_request.split_envs(values) == (envs, variables)


def test_env_refuses_a_name_that_is_not_a_variable():
    with pytest.raises(BadInput, match="NAME=value"):
        inspect_request.split_envs(["A B=1"])


@pytest.mark.parametrize(
    "value,inspects",
    [
        ("docker", True),
        ("local", True),
        ("docker:compose.yml", True),
        ("k8s:values/chart.yaml", True),
        ("mypkg.sandboxes:fancy", False),
        ("fleetsandbox:podman", False),
    ],
)
def test_sandbox_takes_inspects_type_config_or_a_module_type(value: str, inspects: bool):
    assert inspect_request.is_inspect_sandbox(value) is inspects


def test_a_sandbox_config_must_be_beside_the_task(tmp_path: Path):
    task = tmp_path / "t.py"
    task.write_text("")
    with pytest.raises(BadInput, match="no compose.yml beside"):
        inspect_request.check_sandbox_config("docker:compose.yml", [task])
    (tmp_path / "compose.yml").write_text("services: {}\n")
    inspect_request.check_sandbox_config("docker:compose.yml", [task])


def test_models_split_and_repeat_as_inspect_takes_them():
    assert inspect_request.models(("a/x,b/y", "c/z", "a/x"), None, None, plain=True) == ["a/x", "b/y", "c/z"]
    assert inspect_request.models((), "q/r", None, plain=True) == ["q/r"]


def test_without_a_model_a_plain_task_gets_inspects_default_and_a_setting_the_mock(monkeypatch):
    """`inspect eval task.py` with no --model and no INSPECT_EVAL_MODEL runs the none model
    (a task that calls generate fails): a fleet of the same command must not quietly mock it."""
    from inspect_ai.model import get_model

    monkeypatch.delenv("INSPECT_EVAL_MODEL", raising=False)
    with pytest.raises(ValueError):
        get_model()  # Inspect's own default is no model at all, which its eval() runs as "none"
    assert inspect_request.models((), None, None, plain=True) == [str(get_model("none"))]
    assert inspect_request.models((), None, None, plain=False) == ["mockllm/model"]


def test_the_model_none_is_named_as_inspects_logs_name_it():
    """`--model none` (a task that calls no model): each job's log names none/none, so the
    fleet must expect that, or every result reads as another model's and is rerun to death."""
    from inspect_ai.model import get_model

    assert inspect_request.models(("none",), None, None, plain=True) == [str(get_model("none"))] == ["none/none"]
    assert inspect_request.models(("none,mockllm/model",), None, None, plain=True) == ["none/none", "mockllm/model"]


# -- the Python API: eval()'s arguments ------------------------------------------------


def test_eval_arguments_plan_what_the_same_command_line_plans(tmp_path: Path):
    from inspect_ai import Epochs
    from inspect_ai.solver import SolverSpec

    from ct_fleet.controller.planning import from_eval_args

    request = from_eval_args(
        ["a.py@x", "b.py"],
        model=["openai/a", "openai/b"],
        temperature=0.5,
        epochs=Epochs(3, ["max", "mean"]),
        solver=SolverSpec("s.py@s", {"k": 2}),
        model_roles={"grader": "openai/g"},
        tags=["p", "q"],
        metadata={"owner": "me", "n": 3},
        task_args={"level": 2},
        limit=(2, 5),
        score=False,
        fleet={"ec2_args": ["max_workers=3"]},
    )
    assert request.tasks == ["a.py@x", "b.py"] and request.models == ["openai/a", "openai/b"]
    assert request.epochs == 3 and request.limit == "3-5" and request.ec2_args == ["max_workers=3"]
    assert request.task_args == ("level=2",)
    kwargs = inspect_options.eval_kwargs(inspect_request.read(request.inspect_options).job_options)
    assert (
        kwargs["temperature"] == 0.5 and kwargs["tags"] == ["p", "q"] and kwargs["metadata"] == {"owner": "me", "n": 3}
    )
    assert [r.__registry_info__.name for r in kwargs["epochs"].reducer] == ["max", "mean"]
    assert kwargs["solver"].solver == "s.py@s" and kwargs["solver"].args == {"k": 2}
    assert kwargs["model_roles"] == {"grader": "openai/g"} and kwargs["score"] is False


def test_eval_arguments_without_a_model_take_inspects_model_variable():
    """eval(task) with no model runs INSPECT_EVAL_MODEL's model (Inspect's resolve_models), else none."""
    from ct_fleet.controller.planning import from_eval_args

    given = from_eval_args(["a.py"], None, fleet={"environ": {"INSPECT_EVAL_MODEL": "openai/a,openai/b"}})
    assert given.models == ["openai/a", "openai/b"]
    assert from_eval_args(["a.py"], None, fleet={"environ": {}}).models == []  # planning's default: none/none


def test_a_task_object_is_named_by_its_file_and_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ct_fleet.controller.planning import from_eval_args

    (tmp_path / "objtask.py").write_text(
        "from inspect_ai import Task, task\nfrom inspect_ai.dataset import MemoryDataset, Sample\n\n"
        "@task\ndef counted(n: int = 1):\n    return Task(dataset=MemoryDataset([Sample(input='x')] * n))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from objtask import counted  # type: ignore[import-not-found]

    request = from_eval_args(counted(n=4))
    assert request.tasks == [f"{(tmp_path / 'objtask.py').as_posix()}@counted"] and request.task_args == ("n=4",)
    from inspect_ai import Task
    from inspect_ai.dataset import Sample

    with pytest.raises(BadInput, match="@task function in a file"):
        from_eval_args(Task(dataset=[Sample(input="x")]))
    with pytest.raises(BadInput, match="different arguments"):
        from_eval_args([counted(n=1), counted(n=2)])


@pytest.mark.parametrize(
    "kwargs,said",
    [
        ({"display": "full"}, "display"),
        ({"trace": True}, "trace"),
        ({"no_such_argument": 1}, "not an argument of inspect_ai.eval()"),
        ({"model_roles": {"grader": object()}}, "model role a model name"),
        ({"solver": object()}, "SolverSpec"),
    ],
)
def test_eval_arguments_a_fleet_cannot_take_are_refused(kwargs: dict[str, Any], said: str):
    from ct_fleet.controller.planning import from_eval_args

    with pytest.raises(BadInput, match=said):
        from_eval_args("t.py", **kwargs)


def test_the_probe_shuffles_as_inspect_does_before_it_selects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from inspect_ai.dataset import MemoryDataset, Sample

    from ct_fleet.controller.planning.probe import probe

    (tmp_path / "many.py").write_text(
        "from inspect_ai import Task, task\nfrom inspect_ai.dataset import MemoryDataset, Sample\n\n"
        "@task\ndef many():\n    return Task(dataset=MemoryDataset([Sample(id=i, input='x') for i in range(1, 21)]))\n"
    )
    monkeypatch.chdir(tmp_path)
    answer = probe({"spec": "many.py@many", "limit": 5, "shuffle": 7})
    expected = MemoryDataset([Sample(id=i, input="x") for i in range(1, 21)])
    expected.shuffle(7)
    assert answer["tasks"][0]["sample_ids"] == [s.id for s in expected][:5] != [1, 2, 3, 4, 5]
