"""`build-ami`: build the worker AMI with Packer and rotate its id in SSM.

Registered as `ct-fleet cloud build-ami`; also `bin/build-ami` and
`python -m ct_fleet.cli.build_ami`. See docs/ami.md.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import boto3
import click
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
from rich.console import Console
from rich.table import Table

from .. import ami
from ..errors import BadInput
from ..services.session import ClientSettings, client_config, configure, region_name

EPILOG = """\b
Examples:
  bin/build-ami                      incremental: from the AMI in SSM, pull changed images
  bin/build-ami --fresh              full rebuild from stock Ubuntu 22.04
  bin/build-ami --region us-west-2   build (and keep the id in SSM) in another region
  bin/build-ami --dry-run            show the plan and run `packer validate`; change nothing
"""


def _plan_table(plan: ami.BuildPlan, dry_run: bool) -> Table:
    table = Table(title="worker AMI build" + (" (dry run)" if dry_run else ""), show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("region", plan.region)
    table.add_row("kind", plan.kind)
    table.add_row("source AMI", plan.source_ami or "newest Canonical Ubuntu 22.04 (source_ami_filter)")
    table.add_row("SSM parameter", f"{plan.param} = {plan.previous_ami_id or '(none)'}")
    built = sum(1 for i in plan.image_plan if i.how == "build")
    table.add_row("images", f"{len(plan.images)} ({built} built on the builder, {len(plan.images) - built} pulled)")
    table.add_row("build id", plan.build_id)
    table.add_row("builder profile", plan.variables.get("iam_instance_profile") or "(none: anonymous pulls)")
    table.add_row("launched by", plan.variables.get("launched_by", ""))
    extra = {k: v for k, v in plan.variables.items() if k not in _SHOWN_VARS}
    for key, value in extra.items():
        table.add_row(f"var {key}", value)
    return table


_SHOWN_VARS = {
    "region",
    "source_ami",
    "build_id",
    "ssm_param",
    "iam_instance_profile",
    "images_file",
    "launched_by",
    "build_settings",
    "local_images",
}


def _images_table(plan: ami.BuildPlan) -> Table:
    """Every image the AMI will carry, where it comes from and how it gets there."""
    table = Table(title="images to bake")
    table.add_column("image")
    table.add_column("named by")
    table.add_column("how")
    for image in plan.image_plan:
        table.add_row(image.ref, image.source, "bin/build-images" if image.how == "build" else "docker pull")
    return table


def _timings_table(timings: ami.Timings) -> Table:
    table = Table(title="phase timings")
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    total = 0.0
    for name, seconds in timings.phases:
        table.add_row(name, f"{seconds:.1f}")
        if not name.startswith("  "):  # provisioning sub-steps are inside `packer: provision`
            total += seconds
    table.add_row("[bold]total[/bold]", f"[bold]{total:.1f}[/bold]")
    return table


def _fail(console: Console, message: str, code: int) -> None:
    console.print(f"build-ami: error: {message}", markup=False, highlight=False, soft_wrap=True)
    sys.exit(code)


@click.command("build-ami", epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--fresh", is_flag=True, help="Rebuild from stock Ubuntu 22.04 instead of the current worker AMI.")
@click.option("--region", default=None, help="AWS region to build in [default: AWS_REGION, else us-east-1].")
@click.option("--dry-run", is_flag=True, help="Print the plan and run `packer validate`; launch and change nothing.")
@click.option(
    "--ssm-param", default=ami.DEFAULT_PARAM, show_default=True, help="SSM parameter holding the worker AMI id."
)
@click.option(
    "--instance-profile",
    default=ami.DEFAULT_INSTANCE_PROFILE,
    show_default=True,
    help="Builder instance profile (reads Docker registry auth from SSM); '' pulls anonymously.",
)
@click.option(
    "--setting",
    "settings",
    multiple=True,
    help="Bake the images of this setting's compose files (repeatable) [default: every setting in the repo].",
)
@click.option(
    "--images-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Extra Docker images, besides the settings', to bake in [default: packer/images.txt].",
)
@click.option(
    "--var",
    "extra_vars",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra Packer variable, repeatable (e.g. instance_type=c6i.4xlarge).",
)
@click.option(
    "--packer", "packer_bin", default="packer", envvar="CT_FLEET_PACKER", show_default=True, help="Packer executable."
)
def build_ami(
    fresh: bool,
    region: str | None,
    dry_run: bool,
    ssm_param: str,
    instance_profile: str,
    settings: tuple[str, ...],
    images_file: Path | None,
    extra_vars: tuple[str, ...],
    packer_bin: str,
) -> None:
    """Build the worker AMI with Packer and make it the one in SSM.

    Incremental by default: starts from the AMI named in SSM and pulls only the Docker
    images whose digest changed. The images are every one the settings' compose files
    name (built on the builder when the setting builds its own), plus --images-file. On success the new id goes to SSM, then the previous
    AMI is deregistered and its snapshots deleted (one AMI is kept). A failed build
    changes nothing, and its builder instance is terminated.
    """
    configure(ClientSettings.from_environ(os.environ))
    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    region = region or region_name()
    timings = ami.Timings()
    code = 0
    # Holds the generated image list Packer reads; removed with the build, whatever its end.
    with tempfile.TemporaryDirectory(prefix="ct-fleet-ami-") as work_dir:
        try:
            ami.check_region(region)
            ami.find_packer(packer_bin)
            variables = ami.parse_vars(extra_vars)
            session = boto3.Session(region_name=region)
            ec2 = session.client("ec2", config=client_config())
            ssm = session.client("ssm", config=client_config())
            sts = session.client("sts", config=client_config())
            with timings.phase("plan (read SSM)"):
                try:
                    who = ami.launched_by(sts)
                except NoCredentialsError as exc:
                    if not dry_run:
                        raise BadInput(
                            "no AWS credentials: set AWS_PROFILE (then `aws sso login`) or AWS keys"
                        ) from exc
                    who = "unknown"
                except (ClientError, BotoCoreError):
                    if not dry_run:
                        raise
                    who = "unknown"
                plan = ami.plan_build(
                    ec2,
                    ssm,
                    region=region,
                    param=ssm_param,
                    fresh=fresh,
                    images_file=images_file,
                    settings=settings or None,
                    instance_profile=instance_profile,
                    launched_by_value=who,
                    extra_vars=variables,
                    tolerate_aws_errors=dry_run,
                    work_dir=Path(work_dir),
                )
            out.print(_plan_table(plan, dry_run))
            out.print(_images_table(plan))
            for note in plan.notes:
                out.print(f"note: {note}", markup=False, soft_wrap=True)
            if not dry_run:
                out.print(f"building: ~15-20 min, mostly EBS snapshotting (build {plan.build_id})")
            result = ami.build_ami(
                ec2,
                ssm,
                plan,
                packer=packer_bin,
                env=ami.packer_env(session, region),
                dry_run=dry_run,
                on_line=lambda line: out.print(line, markup=False, highlight=False, soft_wrap=True),
                timings=timings,
            )
            if dry_run:
                out.print("dry run: template valid; nothing launched, SSM unchanged")
            else:
                _report(out, result)
                if result.rotation and result.rotation.errors:
                    code = 1
        except BadInput as exc:
            _fail(err, str(exc), BadInput.exit_code)
        except ami.BuildFailed as exc:
            out.print(_timings_table(timings))
            _fail(err, str(exc), 1)
        except KeyboardInterrupt:
            out.print(_timings_table(timings))
            _fail(err, "interrupted: builder instances of this build were terminated; SSM unchanged", 130)
        except (ami.AmiError, ClientError, BotoCoreError) as exc:
            out.print(_timings_table(timings))
            _fail(err, f"{type(exc).__name__}: {exc}", 1)
        out.print(_timings_table(timings))
    sys.exit(code)


def _report(out: Console, result: ami.BuildResult) -> None:
    rotation = result.rotation
    assert rotation is not None
    out.print(f"new worker AMI {result.ami_id} stored in SSM {result.plan.param}")
    if rotation.previous_ami_id:
        out.print(f"previous AMI {rotation.previous_ami_id}")
    if rotation.deregistered:
        out.print(f"deregistered: {', '.join(rotation.deregistered)}")
    if rotation.deleted_snapshots:
        out.print(f"deleted snapshots: {', '.join(rotation.deleted_snapshots)}")
    if result.terminated_builders:
        out.print(f"terminated leftover builders: {', '.join(result.terminated_builders)}")
    for warning in rotation.warnings:
        out.print(f"warning: {warning}", markup=False, soft_wrap=True)
    for error in rotation.errors:
        out.print(f"error: {error} (the new AMI is in SSM; remove the leftover by hand)", markup=False, soft_wrap=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point with one-line usage errors (exit 2) instead of click's usage block."""
    try:
        build_ami.main(args=argv, prog_name="build-ami", standalone_mode=False)
    except click.UsageError as exc:
        print(f"build-ami: error: {exc.format_message().rstrip('.')} (see --help)", file=sys.stderr)
        sys.exit(2)
    except click.Abort:
        print("build-ami: aborted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
