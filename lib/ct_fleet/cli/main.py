"""The `ct-fleet` command group: one function per command, in a module per command.

Every command turns BadInput into one line on stderr and exit status 2.
"""

from __future__ import annotations

import sys

import click

from ..errors import BadInput
from .console import err


class CtFleetGroup(click.Group):
    """Turns BadInput anywhere below into one line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            sys.exit(BadInput.exit_code)


@click.group(cls=CtFleetGroup)
@click.version_option(package_name="ct-fleet")
def cli() -> None:
    """Run Inspect AI evaluations on a fleet of workers.

    Without --ec2 the fleet runs on this machine against an embedded AWS (a moto server
    on loopback) with local worker processes: no account needed. With --ec2 it runs on EC2.
    """


@cli.group(name="cloud")
def cloud_group() -> None:
    """Operate the fleet's cloud resources: the worker AMI, what is running."""


def _register() -> None:
    from .build_ami import build_ami
    from .eval_cmd import eval_command
    from .fleet_cmds import cloud_status_command, logs_command, ssh_command, status_command
    from .merge_cmd import merge_command
    from .run_job_cmd import run_job_command

    for command in (eval_command, merge_command, run_job_command, status_command, logs_command, ssh_command):
        cli.add_command(command)
    cloud_group.add_command(cloud_status_command)
    cloud_group.add_command(build_ami, name="build-ami")


_register()


def main() -> None:
    cli(prog_name="ct-fleet")
