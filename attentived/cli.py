"""The ``attentived`` command line. Thin: parse options, call one function, render.

Exit codes: 0 success, 1 runtime failure, 2 bad input (trace, cluster file, option).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import typer

from attentived import __version__

app = typer.Typer(
    name="attentived",
    help=(
        "Fair, topology-aware GPU job scheduling for Slurm.\n\n"
        "Offline: `attentived replay` simulates a job trace under several policies and "
        "compares JCT, waiting-time fairness and communication cost. "
        "`attentived policies` lists what can be compared."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_BAD_INPUT = 2


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    typer.echo(f"attentived: error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def _bad_input() -> Iterator[None]:
    """Turn input errors (trace, cluster, policy names) into one line on stderr and exit 2."""
    from attentived.agents.registry import UnknownPolicy
    from attentived.simulator.trace import TraceError
    from attentived.topology import TopologyParseError

    try:
        yield
    except (TraceError, TopologyParseError, UnknownPolicy) as e:
        raise _fail(str(e)) from None
    except FileNotFoundError as e:
        raise _fail(f"{e.filename}: no such file") from None
    except IsADirectoryError as e:
        raise _fail(f"{e.filename}: is a folder, not a file") from None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attentived {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    log_level: str = typer.Option("warning", "--log-level", help="debug, info, warning or error."),
    log_json: Optional[bool] = typer.Option(None, "--log-json/--log-console", help="Log format; default JSON unless stderr is a terminal."),
) -> None:
    from attentived.logs import configure

    configure(log_level, log_json)


def _topology(cluster: Optional[Path], nodes: int, gpus_per_node: int, nodes_per_switch: int):
    from attentived.topology import uniform
    from attentived.topology.cluster_file import load_cluster_file

    if cluster is not None:
        return load_cluster_file(cluster)
    try:
        return uniform(nodes, gpus_per_node, nodes_per_switch=nodes_per_switch)
    except ValueError as e:
        raise _fail(str(e)) from None


@app.command()
def replay(
    trace: Optional[Path] = typer.Argument(
        None,
        help="Trace CSV (generic, Philly, Tiresias or Alibaba GPU-2023; format detected from the header; .gz ok). "
        "Default: the bundled Philly sample.",
        show_default=False,
    ),
    sample: Optional[str] = typer.Option(None, "--sample", help="Use a bundled trace instead: philly-sample, philly, tiresias-60."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster TOML file (see docs/cluster-file.md); overrides --nodes."),
    nodes: int = typer.Option(4, "--nodes", help="Quick shape: number of nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Quick shape: GPUs per node (8 = two NVLink islands of 4)."),
    nodes_per_switch: int = typer.Option(4, "--nodes-per-switch", help="Quick shape: nodes under each leaf switch."),
    policy: list[str] = typer.Option(["all"], "--policy", "-p", help="Policy to run (repeat for several), or 'all'. See `attentived policies`."),
    seed: int = typer.Option(0, "--seed", help="Seed for modelled time limits, workload models and random placement."),
    start: Optional[str] = typer.Option(None, "--start", help="Window start, from the trace's first submit (e.g. 3d, 36h, 5400)."),
    end: Optional[str] = typer.Option(None, "--end", help="Window end, same units as --start."),
    users: Optional[str] = typer.Option(None, "--users", help="Comma-separated users/tenants to keep."),
    load_scale: float = typer.Option(1.0, "--load-scale", help="Multiply the arrival rate (2 = twice the offered load)."),
    max_jobs: Optional[int] = typer.Option(None, "--max-jobs", help="Keep only the first N jobs after the other filters."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON on stdout (see README for the shape)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write metrics.json, jobs.csv and PNG plots into this folder."),
) -> None:
    """Replay a job trace in the simulator under one or more policies and compare them.

    Same decision code as the live daemon. Prints a table (or --json) of JCT, waiting
    time, fairness (Jain over users' mean waits), communication cost and utilization.
    """
    from attentived.agents.registry import ALL, make_policy
    from attentived.simulator.replay import replay as run_replay
    from attentived.simulator.samples import sample_path
    from attentived.simulator.trace import load_trace, parse_duration

    from .render import comparison_table, progress_bars

    with _bad_input():
        if trace is not None and sample is not None:
            raise _fail("give a trace file or --sample, not both")
        path = trace if trace is not None else sample_path(sample or "philly-sample")
        window = {}
        for opt, val in (("start", start), ("end", end)):
            if val is not None:
                try:
                    window[opt] = parse_duration(val)
                except ValueError as e:
                    raise _fail(f"--{opt}: {e}") from None
        if load_scale <= 0:
            raise _fail(f"--load-scale must be positive (got {load_scale})")
        if max_jobs is not None and max_jobs < 1:
            raise _fail(f"--max-jobs must be at least 1 (got {max_jobs})")
        names = [n for p in policy for n in (ALL if p == "all" else [p])]
        names = list(dict.fromkeys(names))
        policies = [make_policy(n, seed) for n in names]
        topo = _topology(cluster, nodes, gpus_per_node, nodes_per_switch)
        tr = load_trace(
            path,
            users=[u.strip() for u in users.split(",") if u.strip()] if users else None,
            load_scale=load_scale,
            max_jobs=max_jobs,
            **window,
        )
        with progress_bars(len(tr.jobs)) as on_policy:
            rep = run_replay(tr, topo, policies, seed=seed, on_policy=on_policy)
    if out is not None:
        from attentived.simulator.report import write_report

        files = write_report(rep, out)
        typer.echo(f"wrote {', '.join(str(f) for f in files)}", err=True)
    if as_json:
        typer.echo(json.dumps(rep.as_json(), indent=2))
    else:
        comparison_table(rep)


@app.command()
def topology(
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster TOML file (see docs/cluster-file.md)."),
    nodes: int = typer.Option(4, "--nodes", help="Quick shape: number of nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Quick shape: GPUs per node."),
    nodes_per_switch: int = typer.Option(4, "--nodes-per-switch", help="Quick shape: nodes under each leaf switch."),
    as_json: bool = typer.Option(False, "--json", help="Print the topology as JSON."),
) -> None:
    """Show the cluster as a tree: switches, nodes, NVLink islands, GPUs."""
    from attentived.topology.describe import as_dict

    from .render import topology_tree

    with _bad_input():
        topo = _topology(cluster, nodes, gpus_per_node, nodes_per_switch)
    if as_json:
        typer.echo(json.dumps(as_dict(topo), indent=2))
    else:
        topology_tree(topo)


@app.command()
def policies() -> None:
    """List the policies `replay --policy` accepts: presets, job orders and placers."""
    from attentived.agents.registry import ORDERS, PLACERS, PRESETS

    from .render import policy_list

    policy_list(PRESETS, ORDERS, PLACERS)




@app.command()
def start(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Config file (default /etc/attentived/config.toml; built-in defaults when absent)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and log every action, change nothing in Slurm."),
    once: bool = typer.Option(False, "--once", help="Run one cycle and exit (for cron and debugging)."),
) -> None:
    """Run the scheduling daemon: every cycle, read Slurm, decide, make Slurm carry out the plan."""
    from attentived.daemon.service import main as daemon_main

    code = daemon_main(config, dry_run=dry_run, once=once)
    if code:
        raise typer.Exit(code)
