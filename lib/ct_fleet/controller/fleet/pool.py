"""The fleet's workers: launch, boot diagnosis, replacement and scale-up, and the end of them.

The pool knows the instances it launched (or adopted) and when, what their heartbeats say
about load, and why they died (their bootstrap logs in S3). It decides nothing about jobs:
the run (fleet/run.py) tells it how many jobs remain and how many wait.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...cloud import Cloud
from ...protocol import START_CONCURRENCY, DoneMessage, run_layout
from ...protocol.sizing import first_launch_count
from ...services import instances, launching
from ...services import secrets as fleet_secrets
from ...services.launching import Launched
from ..planning import Capacity
from ..reporting import cost_so_far, record_worker
from . import boot_logs, interrupts, phases, scaling
from .budget import FleetBudget
from .context import RunContext
from .launcher import PoolLauncher, fleet_launcher
from .lost import LostWorkers

STRAGGLER_GRACE = 30
LISTING_LAG = 120  # seconds a launched worker counts as running before EC2's listing shows it


class WorkerPool:
    def __init__(self, ctx: RunContext, *, launched_by: str, account: str, capacity: Capacity) -> None:
        self.cloud, self.spec, self.cfg, self.run_dir = ctx.cloud, ctx.spec, ctx.cfg, ctx.run_dir
        self.secrets, self.warn = ctx.secrets, ctx.warn
        self.launched_by = launched_by
        self.account = account
        self.ec2, self.ssm, self.s3 = ctx.client("ec2"), ctx.client("ssm"), ctx.client("s3")
        self.user_data = ""  # rendered by the run before anything is created
        self.capacity = capacity
        self.max_workers = capacity.max_workers
        self.launcher: PoolLauncher | None = None  # made at the first launch
        self.launched: list[str] = []
        self.short = 0  # workers asked for that EC2 has not given yet
        self.replacements = 0
        self.launch_times: dict[str, float] = {}
        self.prices: dict[str, float] = {}  # USD per hour, per instance
        self.end_times: dict[str, float] = {}
        self.last_scale_up = -math.inf  # monotonic time starts near 0 at boot: never a cool-down at first
        self.worker_load: dict[str, tuple[float, float]] = {}  # instance -> (load, at)
        self.leaving: set[str] = set()  # workers that said they go (spot notice, rebalance)
        self.lost = LostWorkers(ctx.spec.fleet_id)  # the jobs each worker holds, for when it is gone
        self.seen_live: set[str] | None = None  # the live instances at the last look (None: no look yet)
        self.slots = self.cfg.concurrency_per_worker or START_CONCURRENCY
        models = [t.model or ctx.spec.model for t in ctx.spec.tasks] or [ctx.spec.model]
        self.budget = FleetBudget.of_options(  # --max-connections
            ctx.spec.inspect_options, models, self.slots, self.cfg.shared_budget
        )
        self.limits = scaling.LimitClock()  # what holds the fleet back, and how long it did

    # -- launch ------------------------------------------------------------------------
    def adopt(self, instance_ids: list[str]) -> None:
        self.launched = list(instance_ids)

    def launch_first(self, pending: int) -> list[str]:
        self.publish_budget([])  # before a worker starts: it reads then whether the fleet has one
        count = first_launch_count(
            pending, max_workers=self.max_workers, concurrency_per_worker=self.cfg.concurrency_per_worker
        )
        if self.budget.covers_all:
            count = min(count, self.budget.workers_needed())
        ids = self.launch(count, why="first")
        self.publish_budget(self.launched)
        return ids

    def _launcher(self) -> PoolLauncher:
        if self.launcher is None:
            self.launcher = fleet_launcher(
                self.ec2, self.ssm, self.cfg, self.capacity, self.spec.fleet_id, self.launched_by, self.user_data
            )
        return self.launcher

    def running(self) -> set[str]:
        """The instances this fleet launched (or adopted) that still run, as far as it knows."""
        return running(self.launched, self.seen_live, self.launch_times, self.end_times)

    def launch(self, count: int, why: str) -> list[str]:
        """Up to `count` workers, never past max_workers running (a leaving worker is going
        and does not count): what EC2 does not give now is asked again at later looks."""
        room = self.max_workers - len(self.running() - self.leaving)
        if count > room:
            count = max(room, 0)
            if not count:
                return []
        launcher = self._launcher()
        said = launcher.limited
        got = launcher.launch(count)
        ids = [g.instance_id for g in got]
        # Known before anything else can fail: teardown terminates these even when EC2's
        # listing does not show them yet.
        self.launched.extend(ids)
        now = time.time()
        self.launch_times.update({i: now for i in ids})
        self.prices.update({g.instance_id: self.cloud.instance_price(self.cfg, g.pool, g.market) for g in got})
        # A shortfall's own retry leaves what is still missing; any other launch adds to it.
        self.short = (0 if why == "shortfall" else self.short) + count - len(ids)
        if launcher.limited and launcher.limited != said:
            self.warn(f"{len(ids)} of {count} worker(s) launched: {launcher.limited}")
        fell_back = [g for g in got if g.market != launcher.markets[0]]
        if fell_back:
            self.warn(f"{len(fell_back)} worker(s) launched {fell_back[0].market}: {launcher.fell_back}")
        _record_launches(self.run_dir, got, why, self.cfg.concurrency_per_worker or START_CONCURRENCY, self.prices)
        if ids:
            # Secrets must exist before a worker asks for them (it waits a while if not).
            fleet_secrets.put_for_instances(
                self.ssm, self.spec.fleet_id, ids, self.secrets, account=self.account, region=self.cloud.region
            )
            self.cloud.after_launch(ids)
        return ids

    @property
    def limited(self) -> str | None:
        """Why the fleet has fewer workers than it asked for, while it has."""
        return self.launcher.limited if self.launcher and self.short else None

    def fewer_why(self) -> str | None:
        """Why the run had fewer workers than max_workers or than it asked for, if it did."""
        said = [why for why in (self.capacity.clamped, self.launcher and self.launcher.limited) if why]
        return "; ".join(said) or None

    def cost_so_far(self) -> float:
        return cost_so_far(self.launch_times, time.time(), self.prices, self.end_times)

    # -- while it runs -----------------------------------------------------------------
    def publish_budget(self, live: list[str]) -> None:
        self.budget.publish(self.s3, self.cfg.bucket, self.spec.fleet_id, live, self.run_dir / run_layout.BUDGET)

    def on_heartbeat(self, msg: DoneMessage) -> bool:
        """Take a worker's heartbeat, or a done report that carries a rate-limit count
        (protocol/budget.py): False, and nothing done, unless it names a worker this fleet
        launched that still runs (anything holding the worker role can send one)."""
        if msg.instance_id not in self.running():
            return False
        self.budget.on_word(msg)
        if msg.type == "heartbeat":
            self.lost.on_heartbeat(msg)
        if msg.load is not None:
            self.worker_load[msg.instance_id] = (msg.load, time.monotonic())
        for notice in ("spot_notice", "rebalance"):
            if msg.extra.get(notice) and msg.instance_id not in self.leaving:
                # The worker is going (now, or when its jobs end): its replacement starts at once.
                self.leaving.add(msg.instance_id)
                record_worker(self.run_dir, notice, [msg.instance_id])
                self.warn(f"{msg.instance_id}: {notice.replace('_', ' ')}: launching its replacement")
                self.launch(1, why=notice)
        return True

    def live_ids(self) -> list[str]:
        return [inst["InstanceId"] for inst in instances.live_instances(self.ec2, self.spec.fleet_id)]

    def look(self) -> tuple[list[str], list[str]]:
        """(live instances, those that ended since the last look)."""
        live = self.live_ids()
        self.seen_live = set(live)
        self.cloud.poll(live)
        ended = sorted(set(self.launch_times) - set(live) - set(self.end_times))
        for gone in ended:
            self.end_times[gone] = time.time()
        record_worker(self.run_dir, "ended", ended)
        return live, ended

    def manage(self, live: list[str], *, remaining: int, waiting: int) -> str | None:
        """Replace workers that died with work left; add workers while the fleet is CPU-bound.
        Returns why the fleet must stop when workers keep dying."""
        now = time.monotonic()
        if self.short and waiting:
            # Not a replacement: workers EC2 did not give yet (capacity, quota, throttling).
            self.launch(self.short, why="shortfall")
        loads = [load for load, at in self.worker_load.values() if now - at < 3 * self.cfg.heartbeat_interval]
        bound = self.budget.saturated(live) or self.budget.pressure()
        self.limits.at(
            scaling.limit_of(waiting, len(live), self.max_workers, self.capacity.clamped, self.limited, bound, loads),
            now,
        )
        decision = scaling.decide(
            remaining=remaining,
            waiting=waiting,
            live=len(live) + self.short,
            replacements=self.replacements,
            max_replacements=self.cfg.max_replacements,
            max_workers=self.max_workers,
            concurrency_per_worker=self.cfg.concurrency_per_worker,
            fresh_loads=loads,
            cooled=now - self.last_scale_up >= 2 * self.cfg.heartbeat_interval,
            model_bound=bound,
            budget_workers=self.budget.workers_needed() if self.budget.covers_all else None,
        )
        if decision.action == "give_up":
            return self.bootstrap_failure()
        if decision.action == "replace":
            self.replacements += decision.count
            self.warn(
                f"{len(live)} worker(s) up with {waiting} job(s) waiting: launching {decision.count} "
                f"replacement(s) ({self.replacements}/{self.cfg.max_replacements})"
            )
            self.launch(decision.count, why="replacement")
        elif decision.action == "scale_up" and not self.limited:
            self.last_scale_up = now
            self.launch(decision.count, why="scale_up")
        return None

    # -- why workers die ---------------------------------------------------------------
    def deterministic_boot_failure(self, ended: list[str]) -> str | None:
        return boot_logs.deterministic_failure(self.s3, self.cfg.bucket, self.spec.fleet_id, ended)

    def bootstrap_failure(self) -> str:
        return boot_logs.why_workers_die(
            self.s3, self.cfg.bucket, self.spec.fleet_id, self.launched, self.replacements, self.secrets.values()
        )

    # -- the end -----------------------------------------------------------------------
    def teardown(self, *, wait: bool, announce: Callable[[], None], also: Sequence[Callable[[], None]] = ()) -> None:
        """Terminate every worker and delete their secrets, then run `also` (the queues, say).
        With `wait` (the work is done) workers are first told to leave and given
        STRAGGLER_GRACE; an interrupt cuts that wait short, never the termination after it."""
        interrupted: KeyboardInterrupt | None = None
        try:
            live = self.live_ids()
        except Exception as exc:  # the launched ids are still known: terminate those
            self.warn(f"could not list the fleet's instances ({type(exc).__name__}); terminating the ones launched")
            live = []
        if wait and live:
            try:
                live = wait_for_exit(self.ec2, self.cloud, self.spec.fleet_id, self.run_dir, live, announce, self.warn)
            except KeyboardInterrupt as exc:
                interrupted = exc
        with interrupts.shielded(self.warn):
            failures = self.stop_all(live)
            for step in also:
                try:
                    step()
                except Exception as exc:
                    failures.append(exc)
            if failures:
                raise failures[0]
        if interrupted is not None:
            raise interrupted

    def stop_all(self, live: list[str]) -> list[Exception]:
        """Terminate every worker (listed live or ever launched) and delete their secrets.
        Every step is tried even if one fails; the failures are returned."""
        failures: list[Exception] = []
        targets = sorted(set(live) | set(self.launched))
        record_worker(self.run_dir, "ended", [i for i in targets if i not in self.end_times])
        for step in (
            lambda: instances.terminate(self.ec2, targets),
            lambda: launching.delete_fleet_requests(self.ec2, self.spec.fleet_id),
            lambda: launching.delete_launch_templates(self.ec2, self.spec.fleet_id),
            lambda: self.cloud.poll([]),
            lambda: fleet_secrets.delete_fleet_secrets(self.ssm, self.spec.fleet_id),
        ):
            try:
                step()
            except Exception as exc:
                failures.append(exc)
        return failures


def wait_for_exit(
    ec2: Any,
    cloud: Cloud,
    fleet_id: str,
    run_dir: Path,
    live: list[str],
    announce: Callable[[], None],
    warn: Callable[[str], None],
) -> list[str]:
    """The work is done: `announce` tells the workers (protocol/stop.py). They drop what
    they still run, upload their logs and shut down within seconds; the stragglers (one
    still booting, say) are returned after STRAGGLER_GRACE, to be terminated."""
    phases.reached(phases.END_WAIT, run_dir)
    try:
        announce()
    except Exception as ex:  # without the signal workers still leave after idle_timeout
        warn(f"could not signal the end of the run to workers ({ex}); they leave when idle")
    deadline = time.monotonic() + STRAGGLER_GRACE
    pause = 0.2  # a worker leaves within a second of the signal: look early, then every second
    while live and time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(1.0, 2 * pause)
        found = instances.live_instances(ec2, fleet_id)
        cloud.poll([inst["InstanceId"] for inst in found])
        # An instance shutting down has uploaded its log and is leaving by itself.
        live = [inst["InstanceId"] for inst in found if inst["State"]["Name"] != "shutting-down"]
    return live


def running(
    launched: list[str], seen_live: set[str] | None, launch_times: dict[str, float], end_times: dict[str, float]
) -> set[str]:
    if seen_live is None:
        return set(launched)
    # EC2's listing may not show a worker just launched yet
    fresh = {i for i, at in launch_times.items() if time.time() - at < LISTING_LAG}
    return (seen_live | fresh) & set(launched) - set(end_times)


def _record_launches(run_dir: Path, got: list[Launched], why: str, slots: int, prices: dict[str, float]) -> None:
    """For the run report: each worker launched, why, and what it is."""
    for g in got:
        record_worker(
            run_dir,
            "launched",
            [g.instance_id],
            why=why,
            slots=slots,
            hourly_price=prices[g.instance_id],
            instance_type=g.pool.instance_type,
            market=g.market,
        )


def result_fields(pool: WorkerPool, job_seconds: Sequence[float]) -> dict[str, Any]:
    """For the run's result: why it had fewer workers, the limits it was at, and its
    instance time against its samples' (the tail's waste shows in the difference)."""
    pool.limits.at(pool.limits.now, time.monotonic())
    now = time.time()
    lives = sum(pool.end_times.get(i, now) - at for i, at in pool.launch_times.items())
    return {
        "fewer_workers": pool.fewer_why(),
        "limits": {k: round(v, 1) for k, v in pool.limits.seconds.items()},
        "instance_seconds": lives,
        "slot_seconds": lives * pool.slots,
        "sample_seconds": float(sum(job_seconds)),
    }
