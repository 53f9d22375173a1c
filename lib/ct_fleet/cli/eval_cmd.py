"""`ct-fleet eval`: run tasks x epochs as one fleet and merge the results."""

from __future__ import annotations

import select
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from ..controller.fleet import FleetInterrupted, RunHooks, execute
from ..controller.planning import FleetRequest, PlannedFleet, plan_fleet
from ..controller.reporting import RunResult, exit_status, interrupted_summary, run_summary
from ..errors import BadInput
from ..protocol import knobs
from .console import console, err
from .display import LiveProgress, dead_table, estimate_table, money, summary_table

# Long enough to read and answer; short enough that an unattended laptop stops its bill.
PROMPT_SECONDS = 60


def _knob_help() -> str:
    return "\b\nFleet knobs for --ec2-arg key=value (repeatable):\n" + "\n".join(
        f"  {line}" for line in knobs.help_table().splitlines()
    )


@click.command(name="eval", epilog=_knob_help())
@click.argument("task", required=False)
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
@click.option("-e", "--env", "envs", multiple=True, help="environment (repeatable); setting:env picks the setting")
@click.option("-t", "--main-task", "mains", multiple=True, help="main task within the selected envs (repeatable)")
@click.option("-s", "--side-task", "sides", multiple=True, help="side task within the selected envs (repeatable)")
@click.option("--policy", help="honest (default), attack, or module:function")
@click.option("--epochs", type=int, help="epochs per sample (default: the task's, else 1); one job per sample x epoch")
@click.option("--model", help="Inspect model, provider/model (default mockllm/model)")
@click.option("--command", "command", help="run each job as this shell command; it must write one .eval to $CT_OUTPUT")
@click.option("--sandbox", help="external sandbox as module:type, imported on each worker")
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
def eval_command(
    task: str | None,
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
    model: str | None,
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
) -> None:
    """Run tasks x epochs as one fleet and merge the results into one Inspect run per task.

    TASK is what `inspect eval` takes (file.py, file.py@name, a registered name); a file
    outside this repo ships to workers with its directory. Without TASK, a setting's
    tasks run under a policy (--task-file, or -e [setting:]env with -t/-s).

    \b
    Examples:
      ct-fleet eval ~/evals/qa.py@qa -T level=2 --model openai/gpt-4o-mini --limit 50 --epochs 3
      ct-fleet eval --task-file smoke --policy honest --epochs 3
      ct-fleet eval -e web -t fix_login --policy attack -s leak_secret
      ct-fleet eval --task-file smoke -T sandbox=local        # no Docker: Inspect's local sandbox
      ct-fleet eval --ec2 --task-file medium --epochs 10 --ec2-arg max_workers=20
      ct-fleet eval --ec2 --extra-src ~/experiments --policy mypkg.policies:my_policy -e web
      ct-fleet eval -e toyarena:web -e mysetting:lab --policy honest

    A rerun of the same command resumes: only jobs without a finished result run again,
    and those whose sample errored (unless --no-retry-errors).
    Results land in runs/<fleet_id>/ (one merged run per task in merged/, per-job logs in jobs/).
    With --json, stdout holds only the outcome (schema in docs/json.md), for scripts.
    """
    planned = plan_fleet(
        FleetRequest(
            task=task,
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
            model=model,
            command=command,
            sandbox=sandbox,
            extra_src=extra_src,
            requirements=requirements,
            config_path=config_path,
            attack=attack,
            ec2=ec2,
            ec2_args=ec2_args if retry_errors is None else (*ec2_args, f"retry_errors={str(retry_errors).lower()}"),
        )
    )
    # estimate=true stops every cloud: on the embedded one it is a rehearsal of the real run.
    # With --json, stdout is the script's: everything a person reads goes to stderr.
    human = err if as_json else console
    if (planned.cloud.bills or planned.spec.config.estimate) and not _confirm_cost(planned, human):
        return
    if planned.large and not _confirm_large(planned):
        return
    hooks = RunHooks(
        info=lambda text: _say(human, text),
        warn=lambda text: _say(err, f"[yellow]warning:[/] {escape(text)}"),
    )
    fleet_id, run_dir = planned.spec.fleet_id, planned.run_dir
    try:
        with LiveProgress(human) as live:
            hooks.on_progress = live.update
            hooks.leave_running_on_interrupt = lambda: _ask_leave_running(live)
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


def _say(out: Console, text: str) -> None:
    try:
        out.print(text, highlight=False, soft_wrap=True)
    except OSError:
        pass  # the terminal was closed (at the Ctrl-C prompt, say): stopping the fleet matters more


def _confirm_cost(planned: PlannedFleet, out: Console) -> bool:
    """Show the estimate; launch only when confirmed (or auto_confirm). estimate=true stops here."""
    cfg = planned.spec.config
    est = planned.estimate()
    out.print(estimate_table(est, cfg.instance_type))
    if cfg.estimate:
        return False
    if cfg.auto_confirm:
        return True
    if not sys.stdin.isatty():
        raise BadInput("cannot ask for confirmation without a terminal: pass --ec2-arg auto_confirm=true")
    return click.confirm(
        f"launch up to {est.workers} {cfg.instance_type} worker(s) for about ${est.total:.2f}?", default=False
    )


def _confirm_large(planned: PlannedFleet) -> bool:
    """Many jobs (often a typo in --epochs) run only when confirmed, or with auto_confirm."""
    jobs = len(planned.spec.jobs)
    if planned.spec.config.auto_confirm:
        return True
    if not sys.stdin.isatty():
        raise BadInput(f"{jobs:,} jobs is a large run: confirm with --ec2-arg auto_confirm=true")
    return click.confirm(f"start {jobs:,} jobs?", default=False)


def _ask_leave_running(live: LiveProgress) -> bool:
    """Ctrl-C with workers up: stop them (the default), or leave them for a later resume.

    Stop, unless "leave" is typed within PROMPT_SECONDS: without a terminal, on no answer
    (the laptop was walked away from: workers would bill until someone comes back), on
    a closed terminal, or on any other answer.
    """
    if not sys.stdin.isatty():
        return False
    live.stop()  # a redrawing table would bury the question
    err.print(
        f"\ninterrupted: stop the fleet, or leave its workers running for a later resume? "
        f"[stop/leave] (stop in {PROMPT_SECONDS}s): ",
        end="",
        highlight=False,
        markup=False,
    )
    try:
        ready, _, _ = select.select([sys.stdin], [], [], PROMPT_SECONDS)
        answer = sys.stdin.readline() if ready else ""
    except (OSError, ValueError):  # the terminal is gone: that is an answer too
        return False
    if not ready:
        err.print("no answer: stopping", highlight=False)
    return answer.strip().lower() == "leave"


def _report(result: RunResult, console: Console) -> None:
    console.print(
        f"fleet {result.fleet_id}: {result.jobs} jobs ({result.resumed} already done"
        + (f", {result.retried_errors} errored retried" if result.retried_errors else "")
        + "), "
        f"{result.workers_launched} workers"
        + (f" ({result.adopted_workers} adopted)" if result.adopted_workers else "")
        + f", {result.elapsed:.1f}s; enqueued {result.enqueued}, attempts {result.attempts}, "
        f"redeliveries {result.redeliveries}, duplicates dropped {result.duplicates}"
        + (f", EC2 cost ${result.cost:.2f}" if result.cost else ""),
        highlight=False,
    )
    if result.fewer_workers:
        console.print(f"fewer workers than wanted: {result.fewer_workers}", highlight=False)
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
