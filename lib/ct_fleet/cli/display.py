"""What a person sees: a live progress panel while the fleet runs, tables at the end."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table

from ..controller.reporting import Progress, merged_model, metrics_text, total_tokens
from ..error_lines import clipped, epoch_range


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


def tokens_text(tokens: int) -> str:
    if tokens >= 1_000_000:
        return f"{tokens / 1e6:.2f}M"
    return f"{tokens / 1e3:.1f}k" if tokens >= 10_000 else str(tokens)


def money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:.4f}" if 0 < value < 0.01 else f"${value:.2f}"


def progress_row(p: Progress) -> tuple[str, ...]:
    return (
        f"{p.done}/{p.total}",
        str(p.failed),
        str(p.dead),
        str(p.queued),
        str(p.running),
        workers_text(p),
        _duration(p.elapsed),
        _duration(p.eta),
        tokens_text(p.tokens),
        money(p.model_cost),
        money(p.cost),
    )


def progress_table(p: Progress) -> Table:
    table = Table(title="fleet progress", show_header=True, header_style="bold")
    columns = ("done", "failed", "dead", "queued", "running", "workers", "elapsed", "ETA", "tokens", "model $", "EC2 $")
    for column in columns:
        table.add_column(column, justify="right")
    table.add_row(*progress_row(p))
    captions = [f"failed: {p.failures}"] if p.failures else []
    if p.fewer_why:
        captions.append(f"fewer workers than wanted: {p.fewer_why}")
    if p.limit:
        captions.append(f"at the limit of: {p.limit}")
    table.caption = "\n".join(captions) or None
    return table


def workers_text(p: Progress) -> str:
    """Running workers, and how many were wanted when EC2 gives fewer."""
    return f"{p.workers} of {p.wanted}" if p.wanted > p.workers else str(p.workers)


class LiveProgress:
    """A rich Live panel; on a non-terminal it prints a line only when the counts change.

    The panel is drawn when an update changes it, at most every REDRAW seconds, not on
    rich's own timer: a table has nothing to animate, and a redraw costs ~6 ms of the
    controller's CPU, 4 times a second for nothing while the run waits on its workers."""

    REDRAW = 1.0  # the elapsed column counts seconds

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None
        self._last: tuple[int | str, ...] | None = None
        self._drawn: tuple[str, ...] = ()
        self._drawn_at = -math.inf  # the first update draws, however recently the machine booted
        self._undrawn: Progress | None = None
        self.stopped = False

    def __enter__(self) -> "LiveProgress":
        if self.console.is_terminal:
            self.live = Live(console=self.console, auto_refresh=False, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _draw(self) -> None:
        p, self._undrawn = self._undrawn, None
        if self.live and p is not None:
            self._drawn, self._drawn_at = (*progress_row(p), p.failures, p.fewer_why, p.limit), time.monotonic()
            self.live.update(progress_table(p), refresh=True)

    def stop(self) -> None:
        """Stop redrawing (before a prompt: a live table would draw over it); updates then print nothing."""
        if self.live and not self.stopped:
            self._draw()  # the last counts, even if they came within REDRAW of the previous ones
        self.stopped = True
        if self.live:
            self.live.stop()

    def update(self, p: Progress) -> None:
        if self.stopped:
            return
        if self.live:
            row = (*progress_row(p), p.failures, p.fewer_why, p.limit)
            if row == self._drawn:
                return
            self._undrawn = p  # drawn by a later update, or when the panel stops
            if time.monotonic() - self._drawn_at >= self.REDRAW:
                self._draw()
            return
        key = (p.done, p.failed, p.dead, p.workers, p.wanted, p.limit)
        if key != self._last:
            self._last = key
            self.console.print(
                f"progress: {p.done}/{p.total} done, {p.failed} failed, {p.dead} dead, "
                f"{p.queued} queued, {p.running} running, "
                f"{workers_text(p)} workers, {_duration(p.elapsed)} elapsed"
                + (f", {tokens_text(p.tokens)} tokens ({money(p.model_cost)})" if p.tokens else "")
                + ("" if p.cost is None else f", EC2 {money(p.cost)} so far")
                + (f"; failed: {p.failures}" if p.failures else "")
                + (f"; fewer workers than wanted: {p.fewer_why}" if p.fewer_why else "")
                + (f"; at the limit of: {p.limit}" if p.limit else ""),
                markup=False,
                highlight=False,
            )


def summary_table(merged: Sequence[Any]) -> Table:
    """One row per merged log (a task x model): its samples, how many completed (scored
    without an error), errored or are missing, and every metric."""
    table = Table(title="results", header_style="bold")
    for column in ("task", "model", "status", "samples", "completed", "errors", "missing", "metrics", "tokens"):
        table.add_column(column, justify="left" if column in ("task", "model", "status", "metrics") else "right")
    for m in merged:
        table.add_row(
            m.task,
            merged_model(m),
            m.status,
            f"{m.samples_present}/{m.samples_expected}",
            str(m.samples_present - len(m.errors)),
            str(len(m.errors)),
            str(len(m.missing)),
            metrics_text(m.metrics),
            tokens_text(total_tokens(m.model_usage)),
        )
    table.caption = "merged: " + ", ".join(str(m.path) for m in merged)
    return table


def dead_table(rows: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="jobs without a result", header_style="bold red")
    for column in ("sample", "epoch", "ended", "class", "error"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row["sample_id"]),
            str(row["epoch"]),
            "dead-lettered" if row.get("dead") else "failed",
            row["error_class"],
            clipped(row["error"], 300),
        )
    table.caption = "rerun one here with the command printed below it"
    return table


def estimate_table(est: Any, instance_type: str) -> Table:
    table = Table(title="cost estimate", header_style="bold")
    for column in ("jobs", "workers", "per worker", "s/job", "hours", "$/hour", "total"):
        table.add_column(column, justify="right")
    table.add_row(
        str(est.jobs),
        f"{est.workers} x {instance_type}",
        str(est.concurrency),
        f"{est.seconds_per_job:.0f}",
        f"{est.hours:.2f}",
        f"{est.price:.3f}",
        f"${est.total:.2f}",
    )
    table.caption = f"durations: {est.duration_source}" + (f"; $/hour: {est.price_source}" if est.price_source else "")
    if est.checkpoints is not None:
        table.caption += f"; {est.checkpoints}"
    return table


def cloud_status_table(rows: Sequence[Any], now: Any) -> Table:
    table = Table(title="fleets", header_style="bold")
    for column in (
        "fleet",
        "owner",
        "instances",
        "state",
        "oldest",
        "types",
        "work",
        "in flight",
        "done",
        "dead",
        "cost so far",
    ):
        table.add_column(column, justify="left" if column in ("fleet", "owner", "state", "types") else "right")
    for row in rows:
        states: dict[str, int] = {}
        for inst in row.instances:
            states[inst["State"]["Name"]] = states.get(inst["State"]["Name"], 0) + 1
        oldest = min((inst["LaunchTime"] for inst in row.instances), default=None)
        d = row.depths
        table.add_row(
            row.fleet_id,
            row.owner,
            str(len(row.instances)),
            ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "-",
            _duration((now - oldest).total_seconds()) if oldest else "-",
            ", ".join(sorted({inst["InstanceType"] for inst in row.instances})) or "-",
            str(d.get("work", "-")),
            str(d.get("work_in_flight", "-")),
            str(d.get("done", "-")),
            str(d.get("dlq", "-")),
            f"${row.cost:.2f}",
        )
    return table


def run_status_view(st: Any) -> RenderableType:
    """The fleet in one row; then one row per task x model, with its metrics once merged."""
    table = Table(title=f"fleet {st.fleet_id} ({st.state}, from {st.source})", header_style="bold")
    for column in ("jobs", "results", "left", "work", "in flight", "dead", "workers", "epochs"):
        table.add_column(column, justify="right")
    q = st.queues or {}
    table.add_row(
        str(st.jobs),
        str(st.results),
        str(st.left),
        str(q.get("work", "-")),
        str(q.get("work_in_flight", "-")),
        str(q.get("dlq", "-")),
        "-" if st.workers is None else str(st.workers),
        epoch_range([t.epochs for t in st.tasks] or [st.epochs]),
    )
    if st.merged:
        table.caption = "merged: " + ", ".join(st.merged)
    return Group(table, task_table(st.tasks))


def task_table(tasks: Sequence[Any]) -> Table:
    """Each task x model of a fleet (status.TaskProgress): its model, its policy (setting
    runs), its progress, its epochs where tasks run different ones, and the metrics of its
    merged log (the results so far while it runs)."""
    policies = any(t.policy for t in tasks)
    own_epochs = len({t.epochs for t in tasks}) > 1
    table = Table(title="per task x model", header_style="bold")
    columns = (
        "task",
        "model",
        *(("policy",) if policies else ()),
        *(("epochs",) if own_epochs else ()),
        "jobs",
        "results",
        "left",
        "merged",
        "metrics",
    )
    for column in columns:
        table.add_column(column, justify="right" if column in ("epochs", "jobs", "results", "left") else "left")
    for t in tasks:
        table.add_row(
            t.task,
            t.model,
            *((t.policy or "-",) if policies else ()),
            *((str(t.epochs),) if own_epochs else ()),
            str(t.jobs),
            str(t.results),
            str(t.jobs - t.results),
            t.status or "-",
            "-" if t.metrics is None else metrics_text(t.metrics),
        )
    return table


def fleets_table(fleets: Sequence[Any]) -> Table:
    """This machine's fleets (status.FleetStatus each), one row each: what ran, when, how far."""
    policies = any(f.policy for f in fleets)
    table = Table(title="fleets", header_style="bold")
    columns = ("fleet", "created", "cloud", "state", "jobs", "tasks x models", *(("policy",) if policies else ()))
    for column in columns:
        table.add_column(column, justify="right" if column == "jobs" else "left")
    for f in fleets:
        table.add_row(
            f.fleet_id,
            _local_time(f.created_at),
            f.cloud or "-",
            f.state,
            f"{f.results}/{f.jobs}",
            grid_text([(t.task, t.model) for t in f.tasks]),
            *((f.policy or "-",) if policies else ()),
        )
    return table


def grid_text(pairs: Sequence[tuple[str, str]]) -> str:
    """Tasks x models in a few words: `a, b x m1, m2` for a whole grid; else the tasks that
    share their models together, `a x m1, m2; b x m1`."""
    models_of: dict[str, list[str]] = {}
    for task, model in pairs:
        models = models_of.setdefault(task, [])
        if model not in models:
            models.append(model)
    tasks_of: dict[tuple[str, ...], list[str]] = {}
    for task, models in models_of.items():
        tasks_of.setdefault(tuple(models), []).append(task)
    return "; ".join(f"{', '.join(tasks)} x {', '.join(models)}" for models, tasks in tasks_of.items()) or "-"


def _local_time(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch)) if epoch else "-"
