"""The run directory, runs/<fleet_id>/: every name in it, spelled here once.

manifest.json          the fleet's manifest, as written to S3 (a local resume reads it)
code.tar.gz            the code archive that shipped; extra-<name>.tar.gz per --extra-src tree
jobs/<job>.evaljob     each job's verified result (the merge's input, a resume's record)
jobs/<job>.errored     an errored result a rerun set aside while it runs the job again
checkpoints/<job>/     the embedded cloud's copy of a --checkpoint job's checkpoints (fleet/checkpoint_mirror.py)
merged/                one merged Inspect log per task (the results so far while the run goes on)
live-merges.jsonl      one line per merge of the results so far during a run
durations.json         seconds per job, for later fleets' cost estimates
sandbox-images.jsonl   the images each job's sandboxes ran
attempts.jsonl         one line per done report of a job: where, when and how it ran (the report's bars)
workers.jsonl          one line per worker event: launched (and why), ended, spot notice
budget.jsonl           each division of the model budget among the workers (--max-connections)
sample-seconds.json    each sample's seconds this run, for later runs' longest-first order
order.json             the order this run enqueued its jobs in, with each one's expected seconds
phases.json            when the last run reached each of its phases
logs/                  the workers' bootstrap logs, fetched from S3 at the end of a run
report.html, .json     the run report (controller/reporting/run_report.py) and its data
instances/             local worker "instances" (the embedded cloud, loopback EC2)
moto.log, docker.log   the embedded AWS's log, bin/ensure-docker's and bin/build-images'
rerun/                 `ct-fleet run-job`'s output and unpacked trees
controller.lock        one controller per fleet on this machine
paused-at-<phase>      a controller held at a phase (CT_FLEET_PAUSE_AT, for tests)
"""

from __future__ import annotations

from pathlib import Path

# A fleet's per-job logs: one-sample .eval files under a suffix `inspect view` does not list.
JOB_LOG_SUFFIX = ".evaljob"
SET_ASIDE_SUFFIX = ".errored"
MANIFEST = "manifest.json"
CODE_TARBALL = "code.tar.gz"
JOBS = "jobs"
CHECKPOINTS = "checkpoints"
MERGED = "merged"
LIVE_MERGES = "live-merges.jsonl"
DURATIONS = "durations.json"
SPAN = "span.json"  # when the run began and its last result came: the merged runs' span
SANDBOX_IMAGES = "sandbox-images.jsonl"
ATTEMPTS = "attempts.jsonl"
WORKERS = "workers.jsonl"
BUDGET = "budget.jsonl"  # each division of the model budget the controller wrote
SAMPLE_SECONDS = "sample-seconds.json"  # task identity -> sample id (JSON) -> seconds (planning/history.py)
ORDER = "order.json"  # the queue's order as predicted: [[job id, seconds, from history?], ...]
PHASES = "phases.json"
BOOT_LOGS = "logs"
REPORT_HTML = "report.html"
REPORT_JSON = "report.json"
INSTANCES = "instances"
MOTO_LOG = "moto.log"
DOCKER_LOG = "docker.log"
RERUN = "rerun"
LOCK = "controller.lock"


def extra_tarball(run_dir: Path, tree_name: str) -> Path:
    """The tarball of the --extra-src tree shipped under `tree_name` (its basename)."""
    return run_dir / f"extra-{tree_name}.tar.gz"


def jobs_dir(run_dir: Path) -> Path:
    return run_dir / JOBS


def checkpoints_dir(run_dir: Path) -> Path:
    return run_dir / CHECKPOINTS


def job_log(run_dir: Path, job_id: str) -> Path:
    return jobs_dir(run_dir) / f"{job_id}{JOB_LOG_SUFFIX}"


def set_aside_log(run_dir: Path, job_id: str) -> Path:
    return jobs_dir(run_dir) / f"{job_id}{SET_ASIDE_SUFFIX}"


def job_logs(run_dir: Path) -> list[Path]:
    return sorted(jobs_dir(run_dir).glob(f"*{JOB_LOG_SUFFIX}"))


def paused_marker(run_dir: Path, phase: str) -> Path:
    return run_dir / f"paused-at-{phase}"
