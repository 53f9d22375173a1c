"""The `ct-fleet` command group: the commands live in cli/ modules by concern (eval_cmd,
fleet_cmds, merge_cmd, ...), registered here.

Every command turns BadInput (and click's usage errors) into one line on stderr and exit
status 2. Tracebacks are for bugs only: an unexpected exception prints one line naming
the file its full traceback was written to, and exits 1. SIGTERM and SIGHUP stop every
command the way Ctrl-C does, so that its `finally` blocks and atexit hooks run (a task
probe is killed, temp directories are removed) instead of Python dying on the spot.
"""

from __future__ import annotations

import errno
import os
import sys

import click
from botocore.exceptions import (
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
    SSOError,
    TokenRetrievalError,
)
from rich.markup import escape

from ..cloud import login_hint
from ..controller.fleet import stop_signals
from ..controller.planning import apply_inspect_variables, project_dotenv
from ..errors import BadInput
from ..protocol import BadManifest
from ..services import session
from .console import OutlivesItsReader, err
from .crash import write_crash_report
from .disk_full import disk_full_line


def _one_line(text: object) -> str:
    lines = str(text).strip().splitlines()
    return lines[0][:400] if lines else ""


def _login_hint(exc: Exception) -> str:
    profile = os.environ.get("AWS_PROFILE") or None
    if isinstance(exc, ProfileNotFound):
        return (
            f"AWS profile {profile!r} is not configured: create it with `aws configure sso --profile {profile}`, "
            "or set AWS_PROFILE to one you have"
        )
    if isinstance(exc, SSOError | TokenRetrievalError):
        return f"the AWS SSO session has expired or is missing: {login_hint(profile)}"
    return f"no AWS credentials: {login_hint(profile)}"


class CtFleetGroup(click.Group):
    """Turns BadInput anywhere below into one line on stderr and exit status 2.

    `eval` is built when it is first wanted: it takes every option of the installed
    Inspect, read from Inspect's own command, whose import costs a second and a half that
    no other command should pay."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), "eval"})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == "eval" and "eval" not in self.commands:
            from .eval_cmd import build_eval_command

            self.add_command(build_eval_command())
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> object:
        try:
            with stop_signals():
                return super().invoke(ctx)
        except BadInput as exc:
            err.print(f"[bold red]error:[/] {escape(_one_line(exc))}", highlight=False, soft_wrap=True)
            sys.exit(BadInput.exit_code)
        except BadManifest as exc:
            # A fleet's record changed by hand or damaged: bad input, not a bug.
            err.print(
                f"error: {_one_line(exc)} (a damaged or hand-edited manifest.json: remove its run directory, "
                "and rerun the eval command that made the fleet)",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            sys.exit(BadInput.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else "ct-fleet"
            err.print(
                f"error: {_one_line(exc.format_message())} (see {where} --help)",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            err.print("interrupted", highlight=False)
            sys.exit(130)
        except (NoCredentialsError, PartialCredentialsError, ProfileNotFound, SSOError, TokenRetrievalError) as exc:
            # Bad input too: this machine is not logged in to AWS (status, logs, cloud status, --ec2).
            err.print(f"error: {_login_hint(exc)}", highlight=False, markup=False, soft_wrap=True)
            sys.exit(BadInput.exit_code)
        except (EndpointConnectionError, ConnectTimeoutError) as exc:
            # Not a bug: the network, or an endpoint that is not there (AWS_ENDPOINT_URL).
            err.print(
                f"error: cannot reach AWS ({_one_line(exc)}): check the network, the region or AWS_ENDPOINT_URL",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            sys.exit(1)
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno in (errno.EIO, errno.EPIPE):
                sys.exit(1)  # the terminal or pipe we print to is gone: not a bug, and nobody reads a message
            full = disk_full_line(exc)
            if full:
                err.print(f"error: {full}", highlight=False, markup=False, soft_wrap=True)
                sys.exit(1)
            path = write_crash_report(exc)
            err.print(
                f"error: unexpected {type(exc).__name__}: {_one_line(exc)} (a bug; traceback in {path})",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            sys.exit(1)


@click.group(cls=CtFleetGroup)
@click.version_option(package_name="ct-fleet")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run Inspect AI evaluations on a fleet of workers.

    Without --ec2 the fleet runs on this machine against an embedded AWS (a moto server
    on loopback) with local worker processes: no account needed. With --ec2 it runs on EC2.
    """
    if ctx.invoked_subcommand == "eval":
        # Before eval's options are read: INSPECT_EVAL_MODEL and the like from the .env
        # `inspect eval` would read here count as they do for it.
        apply_inspect_variables(project_dotenv(), os.environ)
    session.configure(session.ClientSettings.from_environ(os.environ))


@cli.group(name="cloud")
def cloud_group() -> None:
    """Operate the fleet's cloud resources: the worker AMI, what is running."""


def _register() -> None:
    from .build_ami import build_ami
    from .fleet_cmds import (
        cloud_status_command,
        fleets_command,
        logs_command,
        report_command,
        ssh_command,
        status_command,
    )
    from .merge_cmd import merge_command
    from .run_job_cmd import run_job_command
    from .view_cmd import view_command

    commands = (
        merge_command,
        run_job_command,
        fleets_command,
        status_command,
        report_command,
        view_command,
        logs_command,
        ssh_command,
    )
    for command in commands:
        cli.add_command(command)
    cloud_group.add_command(cloud_status_command)
    cloud_group.add_command(build_ami, name="build-ami")


_register()


def main() -> None:
    sys.stdout = OutlivesItsReader(sys.stdout)
    cli(prog_name="ct-fleet")
