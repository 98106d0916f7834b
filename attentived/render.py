"""Terminal rendering for the CLI: tables and progress bars (rich), nothing else."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from attentived.simulator.replay import Replay


def _duration(seconds: float) -> str:
    """Human scale for seconds: 42s, 3.5m, 7.2h, 2.1d."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def _console() -> Console:
    """Rich's console; when stdout is not a terminal (a pipe, a log) rich would wrap at 80
    columns and cut the numbers, so use a width that fits the table."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def comparison_table(rep: Replay, console: Console | None = None) -> None:
    topo = rep.topology
    summary_table(
        f"{rep.trace.name}: {len(rep.trace.jobs)} jobs on {len(topo.nodes)} nodes / {topo.num_gpus} GPUs (seed {rep.seed})",
        {name: run.summary for name, run in rep.runs.items()},
        console,
    )


def summary_table(title: str, summaries: Mapping[str, Mapping[str, float]], console: Console | None = None) -> None:
    """One row per policy from ``simulator.metrics.summarize`` dicts (or their means)."""
    console = console or _console()
    table = Table(title=escape(title), title_justify="left")  # a trace's name is not markup
    cols = (
        ("policy", None),
        ("avg JCT", "avg_jct"),
        ("p99 JCT", "p99_jct"),
        ("avg wait", "avg_wait"),
        ("p99 wait", "p99_wait"),
        ("Jain wait", "jain_fairness"),
        ("worst user", "max_user_wait"),
        ("Jain slow", "jain_slowdown"),
        ("comm GPU-h", "comm_cost"),
        ("multi-GPU", "multi_gpu_slowdown"),
        ("util", "utilization"),
        ("makespan", "makespan"),
    )
    for title, _ in cols:
        table.add_column(title, justify="left" if title == "policy" else "right", no_wrap=title == "policy")
    best = {k: min(s[k] for s in summaries.values()) for _, k in cols
            if k in ("avg_jct", "p99_jct", "avg_wait", "comm_cost", "max_user_wait")}
    best.update({k: max(s[k] for s in summaries.values()) for k in ("jain_fairness", "jain_slowdown")})
    for name, s in summaries.items():
        cells = [name]
        for _, k in cols[1:]:
            v = s[k]
            if k in ("jain_fairness", "jain_slowdown", "utilization"):
                text = f"{v:.3f}"
            elif k == "multi_gpu_slowdown":
                text = f"{v:.2f}x"
            elif k == "comm_cost":
                text = f"{v / 3600:.1f}"
            else:
                text = _duration(v)
            if k in best and v == best[k]:
                text = f"[bold green]{text}[/]"
            cells.append(text)
        table.add_row(*cells)
    console.print(table)
    console.print("[dim]bold green = best in column; JCT and wait in s/m/h/d; worst user = the worst-off user's mean wait; "
                  "Jain wait = Jain over users' mean waits (rewards everyone waiting equally long), Jain slow = over users' "
                  "mean slowdown max(1, (wait + run) / max(run, 10 s)); comm = extra GPU-hours from non-ideal placement; "
                  "multi-GPU = their mean slowdown from placement[/]")


def stderr_progress(width: int = 24) -> Progress:
    """The progress display every long command uses: bars on stderr, gone when done."""
    return Progress(
        TextColumn(f"{{task.description:<{width}}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )


@contextmanager
def progress_bars(jobs: int) -> Iterator[Callable[[str], Callable[[int], None] | None]]:
    """One bar per policy on a terminal (stderr); silent otherwise."""
    if not sys.stderr.isatty():
        yield lambda name: None
        return
    with stderr_progress() as progress:

        def on_policy(name: str) -> Callable[[int], None]:
            task = progress.add_task(name, total=jobs)
            return lambda done: progress.update(task, completed=done)

        yield on_policy


def policy_list(presets: Mapping, orders: Mapping, placers: Mapping, learned: Mapping, parameters: Mapping,
                console: Console | None = None) -> None:
    """Every policy name ``--policy`` takes; ``parameters`` maps a policy to the
    `Parameter`s it takes (``NAME:KEY=VALUE``)."""
    console = console or _console()
    t = Table(title="presets (`--policy NAME`; `--policy all` runs these and the learned policies below)",
              title_justify="left")
    for c in ("name", "order", "placement", "backfill", "what"):
        t.add_column(c)
    for name, p in presets.items():
        t.add_row(name, p.order, p.placer, "yes" if p.backfill else "no", p.summary)
    console.print(t)
    t = Table(title="learned policies (`--policy NAME`, another model: `NAME:model=FILE` or --model FILE)", title_justify="left")
    t.add_column("name")
    t.add_column("what")
    for name, summary in learned.items():
        t.add_row(name, summary)
    console.print(t)
    for title, reg in (("job orders", orders), ("placers", placers)):
        t = Table(title=f"{title} (compose as ORDER+PLACER[+backfill])", title_justify="left")
        t.add_column("name")
        t.add_column("what")
        for name, factory in reg.items():
            doc = (type(factory(0)).__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
            t.add_row(name, " ".join(doc.split()))
        console.print(t)
    t = Table(title="parameters (`--policy NAME:KEY=VALUE[,KEY=VALUE]`, e.g. portfolio:fairness=0.5; "
                    "compositions of a look-ahead order take its parameters)", title_justify="left")
    for c in ("policy", "key", "values", "default", "what"):
        t.add_column(c)
    for name, params in parameters.items():
        for p in params.values():
            t.add_row(name, p.key, p.accepted, p.default, p.summary)
    console.print(t)


def topology_tree(topo, free=None, console: Console | None = None) -> None:
    """Switches > nodes > NVLink islands > GPUs; with ``free`` (bool per GPU) marks used ones."""
    from rich.tree import Tree

    console = console or _console()
    children: dict[str | None, list[str]] = {}
    for sw, parent in topo.switch_parent.items():
        children.setdefault(parent, []).append(sw)
    leaves = set(topo.switch_names)
    roots = sorted(children.get(None, [])) or sorted(leaves)
    n_free = topo.num_gpus if free is None else int(free.sum())
    root = Tree(f"[bold]cluster[/]: {len(topo.nodes)} nodes, {topo.num_gpus} GPUs, {n_free} free")

    def gpu_cell(g: int) -> str:
        if free is None:
            return str(int(topo.gpu_local[g]))
        return f"[green]{int(topo.gpu_local[g])}[/]" if free[g] else f"[red]{int(topo.gpu_local[g])}*[/]"

    def add_switch(branch, sw: str) -> None:
        node = branch.add(f"[cyan]switch {sw}[/]")
        for child in sorted(children.get(sw, [])):
            add_switch(node, child)
        if sw in leaves:
            for ni, n in enumerate(topo.nodes):
                if n.switch != sw:
                    continue
                base = int(topo.node_first_gpu[ni])
                nf = n.num_gpus if free is None else int(free[base : base + n.num_gpus].sum())
                nb = node.add(f"[bold]{n.name}[/] {n.num_gpus} GPUs, {nf} free")
                for k, isl in enumerate(n.islands):
                    kind = "NVLink island" if len(isl) > 1 else "GPU (no NVLink peer)"
                    nb.add(f"{kind} {k}: " + " ".join(gpu_cell(base + g) for g in isl))

    for sw in roots:
        add_switch(root, sw)
    console.print(root)
    bw = topo.bandwidths
    console.print(
        f"[dim]bandwidths GB/s: NVLink {bw.nvlink:g}, PCIe switch {bw.pcie_switch:g}, PCIe host {bw.pcie_host:g}, "
        f"socket {bw.socket:g}, network {bw.network:g}, spine {bw.spine:g}"
        + ("" if free is None else "; red* = in use")
        + "[/]"
    )
