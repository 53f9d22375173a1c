"""The queue's order (planning/history.py: the longest first), with the history of `--ec2`
fleets in S3 besides this machine's runs/, and this run's durations added to it at its end."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from ...services import history
from ..planning import Job, identities, longest_first, seconds_of_run
from .context import RunContext


def order_pending(ctx: RunContext, pending: list[Job]) -> list[Job]:
    remote = {}
    if ctx.cloud.bills:  # the embedded cloud's S3 holds no earlier fleet
        for identity in identities(ctx.spec.tasks):
            try:
                remote[identity] = history.get(ctx.client("s3"), ctx.cfg.bucket, identity)
            except (BotoCoreError, ClientError) as exc:
                ctx.warn(f"could not read the job durations of earlier fleets ({exc}); ordering by this machine's")
    return longest_first(ctx.run_dir, ctx.spec.tasks, pending, remote)


def record_history(ctx: RunContext) -> None:
    """This run's durations, for the order of later `--ec2` fleets of the same tasks."""
    if not ctx.cloud.bills:
        return
    try:
        history.merge(ctx.client("s3"), ctx.cfg.bucket, seconds_of_run(ctx.run_dir))
    except (BotoCoreError, ClientError) as exc:
        ctx.warn(f"could not record this run's job durations in S3 ({exc})")
