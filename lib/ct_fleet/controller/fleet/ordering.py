"""The queue's order (planning/history.py: the longest first), with the history of `--ec2`
fleets in S3 besides this machine's runs/, and this run's durations added to it at its end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from ...services import history
from ..planning import Job, identities, longest_first, seconds_of_run

if TYPE_CHECKING:
    from .run import FleetRun


def order_pending(run: FleetRun, pending: list[Job]) -> list[Job]:
    remote = {}
    if run.cloud.bills:  # the embedded cloud's S3 holds no earlier fleet
        for identity in identities(run.spec.tasks):
            try:
                remote[identity] = history.get(run.s3, run.cfg.bucket, identity)
            except (BotoCoreError, ClientError) as exc:
                run.warn(f"could not read the job durations of earlier fleets ({exc}); ordering by this machine's")
    return longest_first(run.run_dir, run.spec.tasks, pending, remote)


def record_history(run: FleetRun) -> None:
    """This run's durations, for the order of later `--ec2` fleets of the same tasks."""
    if not run.cloud.bills:
        return
    try:
        history.merge(run.s3, run.cfg.bucket, seconds_of_run(run.run_dir))
    except (BotoCoreError, ClientError) as exc:
        run.warn(f"could not record this run's job durations in S3 ({exc})")
