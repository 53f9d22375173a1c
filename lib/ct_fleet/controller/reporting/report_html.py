"""The run report as one self-contained HTML page (runs/<fleet>/report.html), its data in
report.json beside it.

Charts are Plotly's: a maintained library whose Python side builds the figures from plain
lists and whose plotly.js (MIT, one file) is inlined into the page, so the report opens
offline, from disk or as a CI artifact, with zoom and hover and no CDN. Matplotlib would
give static images only; Bokeh and Altair need their JS from a CDN unless bundled by hand.
The page inlines plotly.js once (about 4.8 MB) for its three figures; the tables are HTML.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ...errors import BadInput
from ...protocol import run_layout
from .merged import metrics_text
from .run_report import SLOWEST, Bar, RunReport, build_report
from .usage import MODEL_PRICES

COLOURS = {
    "success": "#2e8b57",
    "sample_error": "#e69f00",
    "failed": "#d62728",
    "retry": "#9467bd",
    "skipped_duplicate": "#b0b0b0",
    "boot": "#c7c7c7",
    "bootstrap": "#7f9fbf",
}
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 0.9em; }
"""


def write_report(run_dir: Path, model_prices: Path = MODEL_PRICES) -> Path:
    """Write report.json and report.html for the fleet in run_dir; the HTML's path.
    `model_prices`: the table that prices model tokens (usage.model_prices)."""
    if not (run_dir / run_layout.MANIFEST).is_file():
        raise BadInput(f"no fleet {run_dir.name} in {run_dir.parent}: a report is written where its fleet ran")
    if not (run_dir / run_layout.ATTEMPTS).is_file():
        raise BadInput(f"fleet {run_dir.name} has no job reports yet: nothing to report")
    report = build_report(run_dir, model_prices)
    (run_dir / run_layout.REPORT_JSON).write_text(report.model_dump_json(indent=1))
    page = run_dir / run_layout.REPORT_HTML
    page.write_text(render(report), encoding="utf-8")
    return page


def render(report: RunReport) -> str:
    import plotly.graph_objects as go
    from plotly.offline import get_plotlyjs

    figures = {
        "timeline": _timeline(go, report),
        "throughput": _throughput(go, report),
        "cost": _cost(go, report),
    }
    divs = {
        name: fig.to_html(full_html=False, include_plotlyjs=False, div_id=name, config={"displaylogo": False})
        for name, fig in figures.items()
    }
    outcomes = ", ".join(f"{count} {name}" for name, count in sorted(report.outcomes.items()))
    title = f"ct-fleet run report: fleet {report.fleet_id}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>{STYLE}</style>
<script>{get_plotlyjs()}</script>
</head><body>
<h1>{_e(title)}</h1>
<p>{report.jobs} jobs: {_e(outcomes)}; {len(report.workers)} workers, {len(report.lanes)} slots.
Times are seconds since the run began.</p>
<h2>Results</h2>{_results(report)}
<h2>Workers x time</h2>{divs["timeline"]}
<h2>Throughput</h2>{divs["throughput"]}
<h2>Cost</h2>{divs["cost"]}
<h2>Phases</h2>{_table(["phase", "from (s)", "seconds"], [(p.label, p.start, p.seconds) for p in report.phases])}
<h2>Workers</h2>{_workers_table(report)}
<h2>Failures</h2>{_failures_table(report)}
{_checkpoints(report)}
<h2>Slowest jobs</h2>{_bars_table(report.slowest)}
{_order_table(report)}
</body></html>
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f'<td class="n">{value:.1f}</td>'
    if isinstance(value, int):
        return f'<td class="n">{value}</td>'
    return "<td></td>" if value is None else f"<td>{value}</td>"  # str cells come escaped


def _table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    body = "".join("<tr>" + "".join(_cell(v if not isinstance(v, str) else _e(v)) for v in r) + "</tr>" for r in rows)
    return "<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + f"</tr>{body}</table>"


def _lane_label(instance_id: str, slot: int) -> str:
    return f"{instance_id} #{slot}"


def _boot_label(instance_id: str) -> str:
    return f"{instance_id} boot"


def _hbar(go: Any, name: str, rows: list[tuple[str, float, float, str]]) -> Any:
    """Horizontal bars (lane, start, end, hover text)."""
    return go.Bar(
        orientation="h",
        name=name,
        y=[r[0] for r in rows],
        base=[r[1] for r in rows],
        x=[max(r[2] - r[1], 0.05) for r in rows],  # a skipped duplicate still shows
        hovertext=[r[3] for r in rows],
        hoverinfo="text",
        marker_color=COLOURS.get(name, "#444"),
    )


def _timeline(go: Any, report: RunReport) -> Any:
    order: list[str] = []
    for worker in report.workers:
        order.append(_boot_label(worker.instance_id))
        order += [
            _lane_label(lane.instance_id, lane.slot) for lane in report.lanes if lane.instance_id == worker.instance_id
        ]
    fig = go.Figure()
    phases: dict[str, list[tuple[str, float, float, str]]] = {"boot": [], "bootstrap": []}
    for w in report.workers:
        row = _boot_label(w.instance_id)
        if w.launched is not None and w.booted is not None:
            phases["boot"].append((row, w.launched, w.booted, f"{w.instance_id}: boot {w.booted - w.launched:.0f}s"))
        if w.booted is not None and w.ready is not None:
            phases["bootstrap"].append(
                (row, w.booted, w.ready, f"{w.instance_id}: bootstrap {w.ready - w.booted:.0f}s")
            )
    for name, rows in phases.items():
        if rows:
            fig.add_trace(_hbar(go, name, rows))
    by_outcome: dict[str, list[tuple[str, float, float, str]]] = {}
    for bar in report.bars:
        lane = report.lanes[bar.lane]
        hover = f"{bar.job_id}: {bar.sample_id} epoch {bar.epoch}, {bar.outcome} in {bar.seconds:.1f}s"
        if bar.error:
            hover += f"<br>{_e(bar.error_class)}: {_e(bar.error[:120])}"
        by_outcome.setdefault(bar.outcome, []).append(
            (_lane_label(lane.instance_id, lane.slot), bar.start, bar.end, hover)
        )
    for name, rows in by_outcome.items():
        fig.add_trace(_hbar(go, name, rows))
    marks = (
        [(w.spot_notice, w.instance_id, "spot notice", "x") for w in report.workers if w.spot_notice is not None]
        + [(w.rebalance, w.instance_id, "rebalance", "diamond") for w in report.workers if w.rebalance is not None]
        + [
            (w.launched, w.instance_id, w.why, "triangle-right")
            for w in report.workers
            if w.why in ("replacement", "scale_up", "shortfall", "spot_notice", "rebalance")
        ]
    )
    for at, instance_id, what, symbol in marks:
        fig.add_trace(
            go.Scatter(
                x=[at],
                y=[_boot_label(instance_id)],
                mode="markers",
                marker={"symbol": symbol, "size": 12, "color": "#000"},
                name=str(what),
                hovertext=[f"{instance_id}: {what} at {at:.0f}s"],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        barmode="overlay",
        height=max(300, 22 * len(order) + 120),
        xaxis_title="seconds since the run began",
        yaxis={"categoryorder": "array", "categoryarray": order, "autorange": "reversed"},
        legend_title="outcome",
        margin={"l": 10, "r": 10, "t": 10},
    )
    return fig


def _throughput(go: Any, report: RunReport) -> Any:
    fig = go.Figure(go.Bar(x=list(range(len(report.throughput))), y=report.throughput, name="results"))
    fig.update_layout(
        height=300,
        xaxis={"title": "minute of the run (0: its first)", "dtick": 1},
        yaxis_title="results per minute",
        margin={"t": 10},
    )
    return fig


def _cost(go: Any, report: RunReport) -> Any:
    at = [p.at for p in report.cost]
    fig = go.Figure()
    for name, values in (("EC2", [p.ec2 for p in report.cost]), ("model tokens", [p.model for p in report.cost])):
        fig.add_trace(go.Scatter(x=at, y=values, name=name, mode="lines", line_shape="hv"))
    price = f"EC2 at ${report.hourly_price:.4f}/h per worker" if report.hourly_price else "EC2: nothing billed"
    fig.update_layout(
        height=300, xaxis_title=f"seconds since the run began ({price})", yaxis_title="USD so far", margin={"t": 10}
    )
    return fig


def _results(report: RunReport) -> str:
    """Each task x model with its merged log's metrics: first, when the fleet ran several
    models, a grid of tasks x models; then a table per task x model, a row per scorer."""
    if not report.results:
        return "<p>no tasks</p>"
    parts = []
    models = list(dict.fromkeys(r.model for r in report.results))
    tasks = list(dict.fromkeys(r.task for r in report.results))
    if len(models) > 1:
        cell = {(r.task, r.model): metrics_text(r.metrics) if r.log else "no results" for r in report.results}
        rows = [(task, *(cell.get((task, model), "-") for model in models)) for task in tasks]
        parts.append(_table(["task", *models], rows))
    for r in report.results:
        what = f"{r.task} \u00b7 {r.model}" + (f" \u00b7 policy {r.policy}" if r.policy else "")
        parts.append(f"<h3>{_e(what)}</h3>")
        if r.log is None:
            parts.append(f"<p>{r.jobs} jobs, no result merged.</p>")
            continue
        said = f"{r.status}" + (f" ({r.error})" if r.error else "")
        parts.append(
            f"<p>{_e(said)}: {r.completed} of {r.samples} samples scored without an error; "
            f"{r.tokens} tokens. Log: <code>{_e(r.log)}</code></p>"
        )
        parts.append(_metrics_table(r.metrics))
    return "\n".join(parts)


def _metrics_table(metrics: dict[str, dict[str, float]]) -> str:
    """A row per scorer, a column per metric any of them computed."""
    if not metrics:
        return "<p>no metrics</p>"
    names = list(dict.fromkeys(name for values in metrics.values() for name in values))
    head = "".join(f"<th>{_e(h)}</th>" for h in ["scorer", *names])
    body = "".join(
        f"<tr><td>{_e(scorer)}</td>"
        + "".join(f'<td class="n">{values[name]:.4g}</td>' if name in values else "<td></td>" for name in names)
        + "</tr>"
        for scorer, values in metrics.items()
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _workers_table(report: RunReport) -> str:
    def span(a: float | None, b: float | None) -> float | None:
        return b - a if a is not None and b is not None else None

    rows = [
        (w.instance_id, w.why, w.slots, span(w.launched, w.booted), span(w.booted, w.ready), w.ended, w.failed_step)
        for w in report.workers
    ]
    return _table(
        ["instance", "launched as", "slots", "boot (s)", "bootstrap (s)", "ended at (s)", "failed step"], rows
    )


def _checkpoints(report: RunReport) -> str:
    c = report.checkpoints
    if c is None:
        return ""
    each = f" ({c.seconds_each:.2f} s each)" if c.seconds_each is not None else ""
    return (
        "<h2>Checkpoints</h2>"
        f"<p>{c.samples_resumed} sample(s) resumed from a checkpoint of a lost attempt: "
        f"{c.model_calls_saved} model call(s) and {c.seconds_saved:.1f} s of sample time not spent again. "
        f"{c.samples_checkpointed} sample(s) committed {c.checkpoints} checkpoint(s): "
        f"{c.seconds:.1f} s of the agents' time{each}, {c.bytes_added:,} bytes added to their repositories "
        "(the copy to S3 not included).</p>"
    )


def _failures_table(report: RunReport) -> str:
    if not report.failures:
        return "<p>none</p>"
    rows = [(f.error_class, f.error, f.attempts, f.jobs, f"<code>{_e(f.repro)}</code>") for f in report.failures]
    head = ["class", "error", "attempts", "jobs", "repro (one of its jobs, here)"]
    body = "".join("<tr>" + "".join(_cell(_e(v) if i < 2 else v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    return "<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + f"</tr>{body}</table>"


def _order_table(report: RunReport) -> str:
    """The longest-first queue's first jobs, predicted against actual (none without history)."""
    if not report.order:
        return ""
    rows = [
        (
            p.job_id,
            str(p.sample_id),
            p.queue_rank,
            p.start_rank,
            p.predicted,
            p.actual,
            "yes" if p.from_history else "median",
        )
        for p in report.order[: SLOWEST * 2]
    ]
    heads = ["job", "sample", "queued #", "started #", "predicted s", "actual s", "history"]
    return f"<h2>Longest first: predicted against actual</h2>{_table(heads, rows)}"


def _bars_table(bars: list[Bar]) -> str:
    rows = [(b.job_id, str(b.sample_id), b.epoch, b.instance_id, b.outcome, b.attempt, b.seconds) for b in bars]
    return _table(["job", "sample", "epoch", "instance", "outcome", "attempt", "seconds"], rows)
