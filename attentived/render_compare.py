"""Terminal rendering of ``attentived compare``: one table per workload, and a progress bar."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.table import Table

from attentived.simulator.compare import Comparison, RunResult, Stat

from .render import _console, _duration, stderr_progress

#: (column title, metric, kind); kind picks the format and whether lower is better.
COLUMNS = (
    ("avg JCT", "avg_jct", "time"),
    ("p99 JCT", "p99_jct", "time"),
    ("avg wait", "avg_wait", "time"),
    ("Jain (waits)", "jain_fairness", "ratio+"),
    ("worst user wait", "max_user_wait", "time"),
    ("Jain (slowdown)", "jain_slowdown", "ratio+"),
    ("comm GPU-h", "comm_cost", "gpuh"),
    ("makespan", "makespan", "time"),
    ("util", "utilization", "ratio+"),
    ("decision p50 ms", "decision_p50_ms", "ms"),
    ("decision p99 ms", "decision_p99_ms", "ms"),
)


def _fmt(kind: str, v: float) -> str:
    if kind == "time":
        return _duration(v)
    if kind == "gpuh":
        return f"{v / 3600:.1f}"
    if kind == "ms":
        return f"{v:.2f}"
    return f"{v:.3f}"


def cell(kind: str, s: Stat) -> str:
    """``mean ± half-width`` in the column's unit (``mean`` alone when n = 1)."""
    if s.ci95 is None:
        return _fmt(kind, s.mean)
    return f"{_fmt(kind, s.mean)} ± {_fmt(kind, s.ci95)}"


def comparison_tables(cmp: Comparison, console: Console | None = None) -> None:
    console = console or _console()
    topo = cmp.topology
    stats = cmp.stats()
    n = len(cmp.seeds)
    for wl in cmp.workloads:
        d = wl.describe(topo.num_gpus)
        load = "n/a" if d["offered_load"] is None else f"{d['offered_load']:.2f}"
        table = Table(
            title=f"{wl.label}: {d['jobs']} jobs, offered load {load} on {len(topo.nodes)} nodes / "
            f"{topo.num_gpus} GPUs; mean over {n} seed(s)" + (" ± 95% CI (t)" if n > 1 else " (n=1, no interval)"),
            title_justify="left",
        )
        table.add_column("policy")
        for title, _, _ in COLUMNS:
            table.add_column(title, justify="right")
        per = stats[wl.label]
        best = {}
        for _, m, kind in COLUMNS:
            if kind == "ms":
                continue
            vals = [per[p][m].mean for p in cmp.policies]
            best[m] = max(vals) if kind.endswith("+") else min(vals)
        for p in cmp.policies:
            cells = [p]
            for _, m, kind in COLUMNS:
                text = cell(kind, per[p][m])
                if m in best and per[p][m].mean == best[m]:
                    text = f"[bold green]{text}[/]"
                cells.append(text)
            table.add_row(*cells)
        console.print(table)
        _knob_tables(console, cmp, per)
    console.print(
        "[dim]bold green = best mean in column (check the intervals before calling a winner); "
        "comm = extra GPU-hours from non-ideal placement; decision = wall time per policy call[/]"
    )


def _knob_tables(console: Console, cmp: Comparison, per: dict) -> None:
    """Per fairness knob run at several W: which settings match or beat each other policy
    on avg JCT *and* the worst-off user's wait (`simulator.pareto.versus`)."""
    from attentived.simulator.pareto import knobs, points

    for base, (curve, rivals) in knobs(points({p: per[p] for p in cmp.policies})).items():
        table = Table(title=f"{base} over W = {', '.join(f'{w:g}' for w in curve)}", title_justify="left",
                      caption="covered by: the settings with avg JCT and worst-off user's wait both at most the "
                              "other policy's", caption_justify="left")
        table.add_column("other policy")
        table.add_column("covered by")
        for v in rivals:
            table.add_row(v.other, v.describe())
        console.print(table)


@contextmanager
def run_progress(total: int) -> Iterator[Callable[[RunResult], None] | None]:
    """A bar over all runs on a terminal (stderr); ``None`` otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    with stderr_progress(width=40) as progress:
        task = progress.add_task("replays", total=total)

        def done(r: RunResult) -> None:
            progress.update(task, advance=1, description=f"{r.workload} {r.policy} s{r.seed}")

        yield done
