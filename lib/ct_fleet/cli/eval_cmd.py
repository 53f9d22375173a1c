"""`ct-fleet eval`: run tasks x models x epochs as one fleet and merge the results."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console
from rich.markup import escape

from .. import inspect_options
from ..controller.fleet import FleetInterrupted, RunHooks, execute
from ..controller.planning import FleetRequest, plan_fleet
from ..controller.reporting import RunResult, exit_status, interrupted_summary, run_summary
from ..errors import BadInput
from ..protocol import knobs
from . import prompts
from .console import console, err
from .display import LiveProgress, dead_table, money, summary_table


def _knob_help() -> str:
    return "\b\nFleet knobs for --ec2-arg key=value (repeatable):\n" + "\n".join(
        f"  {line}" for line in knobs.help_table().splitlines()
    )


# Inspect's options that ct-fleet's own take (Inspect's name: ours), with Inspect's meaning
# and more: several tasks and models, -e setting:env, --sandbox module:type.
OWN_OPTIONS = {
    "tasks": "tasks",
    "model": "models",
    "m": "model_args",
    "t": "task_args",
    "limit": "limit",
    "sample_id": "sample_ids",
    "epochs": "epochs",
    "json_output": "as_json",
    "env": "envs",
    "sandbox": "sandbox",
}
# Of those, the ones that keep Inspect's environment variable (INSPECT_EVAL_MODEL=...):
# what to run, not how this process talks.
OWN_ENVVARS = ("model", "m", "t", "limit", "sample_id", "epochs")


@click.command(name="eval", epilog=_knob_help())
@click.argument("tasks", nargs=-1)
@click.option(
    "-T",
    "--task-arg",
    "task_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="task argument, as inspect eval -T (repeatable): of TASK, or of a setting's task (-T sandbox=local)",
)
@click.option("-M", "model_args", multiple=True, metavar="KEY=VALUE", help="model argument (repeatable)")
@click.option("--sample-id", "sample_ids", multiple=True, metavar="ID[,ID...]", help="samples of TASK to run")
@click.option("--limit", metavar="N|START-STOP", help="the first N samples of TASK (or a range)")
@click.option("--task-file", help="named task set (examples/task_sets/NAME.yml|.jsonl) or a path")
@click.option(
    "-e",
    "--env",
    "envs",
    multiple=True,
    metavar="[SETTING:]ENV | NAME=VALUE",
    help="a setting's environment (repeatable; setting:env picks the setting); "
    "NAME=VALUE sets a variable for every job, as inspect eval --env (sent to workers as a secret)",
)
@click.option("-t", "--main-task", "mains", multiple=True, help="main task within the selected envs (repeatable)")
@click.option("-s", "--side-task", "sides", multiple=True, help="side task within the selected envs (repeatable)")
@click.option("--policy", help="honest (default), attack, or module:function")
@click.option("--epochs", type=int, help="epochs per sample (default: the task's, else 1); one job per sample x epoch")
@click.option(
    "--model",
    "models",
    multiple=True,
    metavar="MODEL[,MODEL...]",
    help="Inspect model(s), provider/model, or none for a task that calls no model (the default for "
    "TASK, as in inspect eval; a setting's default is mockllm/model); "
    "several (a,b or repeated) run every task with each: one merged log per task x model",
)
@click.option("--command", "command", help="run each job as this shell command; it must write one .eval to $CT_OUTPUT")
@click.option(
    "--sandbox",
    metavar="TYPE[:CONFIG] | MODULE:TYPE",
    help="Inspect's sandbox for every job (docker, docker:compose.yml beside the task, local); "
    "or an external sandbox type as module:type, imported on each worker",
)
@click.option(
    "--extra-src",
    "extra_src",
    multiple=True,
    type=click.Path(path_type=Path),
    help="also ship DIR to workers as an import root of its own (repeatable)",
)
@click.option(
    "-r",
    "--requirements",
    "requirements",
    multiple=True,
    metavar="REQ",
    help="a package the task needs (name>=1.0, a .whl, or a requirements file; repeatable), "
    "installed for the probe here and on every worker alike",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML run config: task or task_file/setting, policy, model, epochs, ec2, ec2_args, attacks",
)
@click.option("--attack", help="which attack of --config to run (its ec2_args win)")
@click.option(
    "--ec2/--no-ec2",
    default=None,
    help="run on EC2 instead of the embedded local cloud (default: the run config's ec2:, else CT_FLEET_EC2)",
)
@click.option("--ec2-arg", "ec2_args", multiple=True, metavar="KEY=VALUE", help="fleet knob (repeatable; listed below)")
@click.option(
    "--retry-errors/--no-retry-errors",
    default=None,
    help="on a rerun, run the samples that errored again (the default, as inspect eval-set does) or keep them",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="print the outcome as JSON on stdout (docs/json.md); progress and tables go to stderr",
)
@click.pass_context
def eval_command(
    ctx: click.Context,
    /,
    tasks: tuple[str, ...],
    task_args: tuple[str, ...],
    model_args: tuple[str, ...],
    sample_ids: tuple[str, ...],
    limit: str | None,
    task_file: str | None,
    envs: tuple[str, ...],
    mains: tuple[str, ...],
    sides: tuple[str, ...],
    policy: str | None,
    epochs: int | None,
    models: tuple[str, ...],
    command: str | None,
    sandbox: str | None,
    extra_src: tuple[Path, ...],
    requirements: tuple[str, ...],
    config_path: Path | None,
    attack: str | None,
    ec2: bool | None,
    ec2_args: tuple[str, ...],
    retry_errors: bool | None,
    as_json: bool,
    **inspect_values: Any,
) -> None:
    """Run tasks x models x epochs as one fleet and merge the results: one Inspect log per task x model.

    Takes what `inspect eval` takes: TASK... (file.py, file.py@name, a registered name
    pkg/task, a directory or glob of task files) and every `inspect eval` option, with
    Inspect's meaning; the options below marked [fleet] mean that on a fleet, those marked
    [refused] configure one process and are refused. A task file outside this repo ships
    to workers with its directory (or the directory given).
    Without TASK, a setting's tasks run under a policy (--task-file, or -e [setting:]env
    with -t/-s).

    \b
    Examples:
      ct-fleet eval ~/evals/qa.py@qa -T level=2 --model openai/gpt-4o-mini --limit 50 --epochs 3
      ct-fleet eval a.py b.py --model openai/gpt-4o,anthropic/claude-sonnet-4-0 --temperature 0
      ct-fleet eval inspect_evals/gsm8k -r inspect-evals --limit 20 --epochs-reducer max
      ct-fleet eval --task-file smoke --policy honest --epochs 3
      ct-fleet eval -e web -t fix_login --policy attack -s leak_secret
      ct-fleet eval --task-file smoke -T sandbox=local        # no Docker: Inspect's local sandbox
      ct-fleet eval --ec2 --task-file medium --epochs 10 --ec2-arg max_workers=20

    A rerun of the same command resumes: only jobs without a finished result run again,
    and those whose sample errored (unless --no-retry-errors).
    Results land in runs/<fleet_id>/ (one merged log per task x model in merged/, per-job
    logs in jobs/); `ct-fleet fleets` lists this machine's fleets.
    With --json, stdout holds only the outcome (schema in docs/json.md), for scripts.
    """
    inspect_options = _inspect_options(ctx, inspect_values)
    planned = plan_fleet(
        FleetRequest(
            tasks=tasks,
            task_args=task_args,
            model_args=model_args,
            sample_ids=sample_ids,
            limit=limit,
            task_file=task_file,
            envs=envs,
            main_tasks=mains,
            side_tasks=sides,
            policy=policy,
            epochs=epochs,
            models=models,
            command=command,
            sandbox=sandbox,
            extra_src=extra_src,
            requirements=requirements,
            config_path=config_path,
            attack=attack,
            ec2=ec2,
            ec2_args=ec2_args,
            retry_errors=retry_errors,
            inspect_options=inspect_options,
        )
    )
    # estimate=true stops every cloud: on the embedded one it is a rehearsal of the real run.
    # With --json, stdout is the script's: everything a person reads goes to stderr.
    human = err if as_json else console
    if planned.inspect.no_ansi:
        human.no_color = err.no_color = True
    if (planned.cloud.bills or planned.spec.config.estimate) and not prompts.confirm_cost(planned, human):
        return
    if planned.large and not prompts.confirm_large(planned):
        return
    hooks = RunHooks(
        info=lambda text: prompts.say(human, text),
        warn=lambda text: prompts.say(err, f"[yellow]warning:[/] {escape(text)}"),
    )
    fleet_id, run_dir = planned.spec.fleet_id, planned.run_dir
    try:
        with LiveProgress(human) as live:
            if planned.inspect.display != "none":
                hooks.on_progress = live.update
            hooks.leave_running_on_interrupt = lambda: prompts.ask_leave_running(live)
            result = execute(planned, hooks)
    except FleetInterrupted as exc:
        again = f"rerun with --ec2-arg resume={fleet_id}" if planned.spec.config.new_fleet else "rerun the same command"
        try:
            if exc.leave_running:
                err.print(f"fleet {fleet_id} left running: {again} to resume it", highlight=False)
            else:
                err.print(
                    f"fleet {fleet_id} stopped; finished results are kept in {run_dir}/jobs ({again} to resume)",
                    highlight=False,
                )
            if as_json:
                click.echo(interrupted_summary(fleet_id, str(run_dir), "interrupted", 130).model_dump_json(indent=2))
        except OSError:
            pass  # the terminal was closed at the prompt: nobody is there to read it
        sys.exit(130)
    _report(result, human)
    if as_json:
        click.echo(run_summary(result).model_dump_json(indent=2))
    status = exit_status(result)
    if status:
        sys.exit(status)


def _inspect_options(ctx: click.Context, values: dict[str, Any]) -> dict[str, Any]:
    """Inspect's options by Inspect's names: every one a job takes, with the value `inspect
    eval` would give its eval() (its defaults too); the fleet's own only where the user
    set them (on the command line or in Inspect's environment variables). A refused one
    set on the command line stops here."""
    chosen: dict[str, Any] = {}
    for name, value in values.items():
        source = ctx.get_parameter_source(name)
        kind = inspect_options.HANDLING[name].kind
        if kind != "job" and source in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP):
            continue
        if kind == "refused":
            if source == ParameterSource.COMMANDLINE:
                flag = next(p.opts[-1] for p in ctx.command.params if p.name == name)
                raise BadInput(inspect_options.refusal(name, flag))
            continue  # an INSPECT_* variable set for direct runs: not this command's request
        chosen[name] = value
    return chosen


def build_eval_command() -> click.Command:
    """`ct-fleet eval`: its own options, then every other option of the installed Inspect's
    `inspect eval` (ct_fleet.inspect_options), each with a word on what it does here."""
    command = eval_command
    if any(p.name in inspect_options.HANDLING for p in command.params if p.name not in OWN_OPTIONS.values()):
        return command  # built already (a second CLI invocation in one process)
    ours = {p.name: p for p in command.params}
    taken = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    for param in inspect_options.inspect_eval_params():
        assert param.name is not None
        if param.name in OWN_OPTIONS:
            if param.name in OWN_ENVVARS and isinstance(param, click.Option):
                ours[OWN_OPTIONS[param.name]].envvar = param.envvar
            continue
        if param.name in ours or taken & {*param.opts, *param.secondary_opts}:
            raise RuntimeError(f"inspect eval's {param.opts} collides with a ct-fleet eval option")
        param = copy.copy(param)
        handling = inspect_options.HANDLING[param.name]
        if isinstance(param, click.Option) and handling.note:
            label = "refused on a fleet" if handling.kind == "refused" else "fleet"
            param.help = f"{param.help or ''} [{label}: {handling.note}]"
        command.params.append(param)
    return command


def limits_text(limits: dict[str, float], elapsed: float) -> str:
    """`model API 80%, CPU 10%` of the run's time."""
    return ", ".join(f"{k} {v / max(elapsed, 1e-9):.0%}" for k, v in sorted(limits.items(), key=lambda kv: -kv[1]))


def _report(result: RunResult, console: Console) -> None:
    console.print(
        f"fleet {result.fleet_id}: {result.jobs} jobs ({result.resumed} already done"
        + (f", {result.retried_errors} errored retried" if result.retried_errors else "")
        + "), "
        f"{result.workers_launched} workers"
        + (f" ({result.adopted_workers} adopted)" if result.adopted_workers else "")
        + f", {result.elapsed:.1f}s; enqueued {result.enqueued}, attempts {result.attempts}, "
        f"redeliveries {result.redeliveries}, duplicates dropped {result.duplicates}"
        + (f", messages not of this fleet dropped {result.dropped_messages}" if result.dropped_messages else "")
        + (f", EC2 cost ${result.cost:.2f}" if result.cost else ""),
        highlight=False,
    )
    if result.samples_resumed:
        console.print(
            f"resumed from checkpoints: {result.samples_resumed} sample(s), "
            f"{result.model_calls_saved} model call(s) and {result.sample_seconds_saved:.1f} s of sample time "
            "not spent again",
            highlight=False,
        )
    if result.fewer_workers:
        console.print(f"fewer workers than wanted: {result.fewer_workers}", highlight=False)
    if result.instance_seconds:
        console.print(
            f"instance-hours {result.instance_seconds / 3600:.3f} ({result.slot_seconds / 3600:.3f} slot-hours) "
            f"for sample-hours {result.sample_seconds / 3600:.3f}: slots busy "
            f"{result.sample_seconds / max(result.slot_seconds, 1e-9):.0%}"
            + (f"; held by {limits_text(result.limits, result.elapsed)}" if result.limits else ""),
            highlight=False,
        )
    if result.tokens:
        unpriced = f" (no price for {', '.join(result.unpriced_models)})" if result.unpriced_models else ""
        console.print(
            f"model usage: {result.tokens} tokens, model cost {money(result.model_cost)}{unpriced}", highlight=False
        )
    if result.merged:
        console.print(summary_table(result.merged))
    if result.dead_report:
        console.print(dead_table(result.dead_report))
        for row in result.dead_report:
            console.print(
                f"  {row['rerun']}    # {row['sample_id']} epoch {row['epoch']}", highlight=False, soft_wrap=True
            )
    for job_id in result.late_successes:
        console.print(f"job {job_id} succeeded after it was dead-lettered: its result counts", highlight=False)
    if result.missing:
        err.print(f"{len(result.missing)} job(s) missing from the merged run:", highlight=False)
        for row in result.missing:
            err.print(
                f"  {row['sample_id']} epoch {row['epoch']}: {row['reason']}    # {row['rerun']}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    if result.report:
        console.print(f"report: {result.report}", highlight=False, soft_wrap=True)
    problems = result.problems()
    if problems:
        err.print("[bold red]not a complete, successful run:[/]", highlight=False)
        for problem in problems:
            err.print(f"  {problem}", highlight=False, soft_wrap=True, markup=False)
