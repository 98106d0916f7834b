"""The ``attentived`` command line. Thin: parse options, call one function, render.

Exit codes: 0 success, 1 runtime failure, 2 bad input (trace, cluster file, option).
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    from attentived.agents.spec import BadPolicyName
    from attentived.simulator.trace import TraceError
    from attentived.topology import TopologyParseError

    errors: tuple[type[Exception], ...] = (TraceError, TopologyParseError, BadPolicyName)
    try:
        yield
    except FileNotFoundError as e:
        raise _fail(f"{e.filename}: no such file") from None
    except IsADirectoryError as e:
        raise _fail(f"{e.filename}: is a folder, not a file") from None
    except Exception as e:
        # A bad model file can only have been raised if the (torch-heavy) loader was imported.
        checkpoint = sys.modules.get("attentived.agents.checkpoint")
        if checkpoint is not None:
            errors += (checkpoint.CheckpointError,)
        if isinstance(e, errors):
            raise _fail(str(e)) from None
        raise


def _unwritable_folder(path: Path) -> str | None:
    """Why ``path`` cannot become an output folder (``None`` when it can): asked before the
    work, so a long run does not end in a traceback at its last step."""
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else f"{p}: is a file, not a folder"
    return None


def _unwritable_file(path: Path) -> str | None:
    """Why ``path`` cannot be written as an output file (``None`` when it can)."""
    if path.is_dir():
        return f"{path}: is a folder; give a file name"
    if not path.parent.is_dir():
        return f"{path.parent}: " + ("is a file, not a folder" if path.parent.exists() else "no such folder")
    return None


def _model_takers(names: list[str], model: Path | None, explicit: set[str]) -> set[str]:
    """The policies ``--model`` goes to: every one named explicitly (a model of another
    agent is then refused), and of those ``all`` brings, the learned ones of the model's
    agent (the others keep their shipped models). The model file is read once."""
    if model is None:
        return set()
    from attentived.agents.learned import AGENT_OF, POLICIES

    brought = [n for n in names if n not in explicit and n.partition(":")[0] in POLICIES]
    if not brought:
        return explicit
    from attentived.agents.checkpoint import load_model

    agent = load_model(model).agent
    return explicit | {n for n in brought if AGENT_OF.get(n.partition(":")[0], n.partition(":")[0]) == agent}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attentived {__version__}")
        raise typer.Exit()


LOG_LEVELS = ("debug", "info", "warning", "error")


@app.callback()
def main(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    log_level: str | None = typer.Option(
        None, "--log-level", show_default=False,
        help="debug, info, warning or error. Default: warning; for `start`, the config's log_level.",
    ),
    log_json: bool | None = typer.Option(
        None, "--log-json/--log-console", show_default=False,
        help="Log format. Default: JSON unless stderr is a terminal; for `start`, the config's log_format.",
    ),
) -> None:
    from attentived.logs import configure

    if log_level is not None:
        if log_level.lower() not in LOG_LEVELS:
            raise _fail(f"--log-level: must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
        log_level = log_level.lower()
    # Only what was given on the command line: `start` hands it to the daemon, where it wins
    # over the config file (whose log_level / log_format apply when an option is absent).
    ctx.obj = {"log_level": log_level, "log_format": None if log_json is None else ("json" if log_json else "console")}
    configure(log_level or "warning", log_json)


def _topology(cluster: Path | None, nodes: int, gpus_per_node: int, nodes_per_switch: int):
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
    trace: Path | None = typer.Argument(
        None,
        help="Trace CSV (generic, Philly, Tiresias or Alibaba GPU-2023; format detected from the header; .gz ok). "
        "Default: the bundled Philly sample.",
        show_default=False,
    ),
    sample: str | None = typer.Option(None, "--sample", help="Use a bundled trace instead: philly-sample, philly, tiresias-60."),
    cluster: Path | None = typer.Option(None, "--cluster", help="Cluster TOML file (see docs/cluster-file.md); overrides --nodes."),
    nodes: int = typer.Option(4, "--nodes", help="Quick shape: number of nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Quick shape: GPUs per node (8 = two NVLink islands of 4)."),
    nodes_per_switch: int = typer.Option(4, "--nodes-per-switch", help="Quick shape: nodes under each leaf switch."),
    policy: list[str] = typer.Option(["all"], "--policy", "-p", help="Policy to run (repeat for several), or 'all'. See `attentived policies`."),
    seed: int = typer.Option(0, "--seed", help="Seed for modelled time limits, workload models and random placement."),
    start: str | None = typer.Option(None, "--start", help="Window start, from the trace's first submit (e.g. 3d, 36h, 5400)."),
    end: str | None = typer.Option(None, "--end", help="Window end, same units as --start."),
    users: str | None = typer.Option(None, "--users", help="Comma-separated users/tenants to keep."),
    load_scale: float = typer.Option(1.0, "--load-scale", help="Multiply the arrival rate (2 = twice the offered load)."),
    max_jobs: int | None = typer.Option(None, "--max-jobs", help="Keep only the first N jobs after the other filters."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON on stdout (see README for the shape)."),
    out: Path | None = typer.Option(None, "--out", help="Also write metrics.json, jobs.csv and PNG plots into this folder."),
    model: Path | None = typer.Option(None, "--model", help="Model file for the learned policies named (default: the shipped model); of those "
                                                              "'all' brings, for the model's own agent's."),
) -> None:
    """Replay a job trace in the simulator under one or more policies and compare them.

    Same decision code as the live daemon. Prints a table (or --json) of JCT, waiting
    time, fairness (Jain over users' mean waits), communication cost and utilization.
    """
    from attentived.agents.registry import expand, make_policy, runnable
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
        if not math.isfinite(load_scale) or load_scale <= 0:
            raise _fail(f"--load-scale must be a positive number (got {load_scale})")
        if max_jobs is not None and max_jobs < 1:
            raise _fail(f"--max-jobs must be at least 1 (got {max_jobs})")
        if len(window) == 2 and window["end"] <= window["start"]:
            raise _fail(f"--end ({end}) must be after --start ({start})")
        if out is not None and (problem := _unwritable_folder(out)):
            raise _fail(f"--out: {problem}")
        names = expand(policy)
        explicit = set(expand([p for p in policy if p != "all"]))
        takers = _model_takers(names, model, explicit)
        policies = [make_policy(n, seed, model=str(model) if n in takers else None) for n in names]
        topo = _topology(cluster, nodes, gpus_per_node, nodes_per_switch)
        policies, notes = runnable(names, policies, explicit, topo)
        for note in notes:
            typer.echo(note, err=True)
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
    cluster: Path | None = typer.Option(None, "--cluster", help="Cluster TOML file (see docs/cluster-file.md)."),
    nodes: int = typer.Option(4, "--nodes", help="Quick shape: number of nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Quick shape: GPUs per node."),
    nodes_per_switch: int = typer.Option(4, "--nodes-per-switch", help="Quick shape: nodes under each leaf switch."),
    as_json: bool = typer.Option(False, "--json", help="Print the topology as JSON."),
    slurm: bool = typer.Option(False, "--slurm", help="Live: used/free GPUs from Slurm, topology from the daemon's source (see --config)."),
    config: Path | None = typer.Option(None, "--config", "-c", help="Daemon config file (implies --slurm): its topology source, partitions and "
                                                                    "Slurm."),
) -> None:
    """Show the cluster as a tree: switches, nodes, NVLink islands, GPUs (--slurm: used/free)."""
    from attentived.topology.describe import as_dict

    from .render import topology_tree

    if slurm or config is not None:
        return _topology_live(config, as_json)
    with _bad_input():
        topo = _topology(cluster, nodes, gpus_per_node, nodes_per_switch)
    if as_json:
        typer.echo(json.dumps(as_dict(topo), indent=2))
    else:
        topology_tree(topo)


@app.command()
def policies() -> None:
    """List the policies `--policy` and the daemon's `policy =` accept: presets, learned
    policies, job orders, placers, and the parameters each takes (NAME:KEY=VALUE)."""
    from attentived.agents.registry import COMMON_PARAMETERS, LEARNED, ORDERS, PLACERS, PRESETS, own_parameters

    from .render import policy_list

    taking = {"every policy": COMMON_PARAMETERS, **{n: own_parameters(n) for n in (*PRESETS, *LEARNED)}}
    policy_list(PRESETS, ORDERS, PLACERS, LEARNED, {n: p for n, p in taking.items() if p})




@app.command()
def start(
    ctx: typer.Context,
    config: Path | None = typer.Option(None, "--config", "-c", help="Config file (default /etc/attentived/config.toml; built-in defaults when "
                                                                    "absent)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and log every action, change nothing in Slurm."),
    once: bool = typer.Option(False, "--once", help="Run one cycle and exit (for cron and debugging)."),
    shadow: bool = typer.Option(False, "--shadow", help="Plan beside Slurm's own scheduler and record what Slurm does; change nothing (see "
                                                        "shadow-report)."),
) -> None:
    """Run the scheduling daemon: every cycle, read Slurm, decide, make Slurm carry out the plan."""
    from attentived.daemon.service import main as daemon_main

    given = {k: v for k, v in (ctx.obj or {}).items() if v is not None}  # --log-level / --log-json|--log-console
    code = daemon_main(config, dry_run=dry_run, once=once, shadow=shadow, **given)
    if code:
        raise typer.Exit(code)


@app.command()
def compare(
    trace: list[Path] = typer.Option([], "--trace", "-t", help="Trace CSV (repeat for several)."),
    sample: list[str] = typer.Option([], "--sample", help="Bundled trace (repeat): philly-sample, philly, tiresias-60."),
    cluster: Path | None = typer.Option(None, "--cluster", help="Cluster TOML file; overrides --nodes."),
    nodes: int = typer.Option(4, "--nodes", help="Quick shape: number of nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Quick shape: GPUs per node."),
    nodes_per_switch: int = typer.Option(4, "--nodes-per-switch", help="Quick shape: nodes under each leaf switch."),
    policy: list[str] = typer.Option(["all"], "--policy", "-p", help="Policy (repeat), or 'all'."),
    seeds: int = typer.Option(3, "--seeds", help="Seeds 0..N-1: each draws time limits, models and random placement."),
    window: list[str] = typer.Option([], "--window", help="START:END cut of every trace (repeat), e.g. 40d:41d."),
    load_scale: float = typer.Option(1.0, "--load-scale", help="Multiply the arrival rate."),
    workers: int | None = typer.Option(None, "--workers", help="Processes (default: CPU count)."),
    out: Path | None = typer.Option(None, "--out", help="Write compare.json, summary.csv and PNG plots here."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON on stdout."),
) -> None:
    """Run every policy on every trace and seed in parallel; mean and 95% CI per metric."""
    from attentived.simulator import compare as cmp
    from attentived.simulator.samples import sample_path

    from .render_compare import comparison_tables, run_progress

    with _bad_input():
        try:
            if seeds < 1:
                raise cmp.CompareError(f"--seeds must be at least 1 (got {seeds})")
            if out is not None and (problem := _unwritable_folder(out)):
                raise cmp.CompareError(f"--out: {problem}")
            paths = list(trace) + [sample_path(s) for s in sample] or [sample_path("philly-sample")]
            workloads = cmp.load_workloads(paths, window, load_scale)
            topo = _topology(cluster, nodes, gpus_per_node, nodes_per_switch)
            names = cmp.policy_names(policy, topo, warn=lambda note: typer.echo(note, err=True))
            total = len(workloads) * len(names) * seeds
            with run_progress(total) as on_done:
                result = cmp.compare(workloads, topo, names, range(seeds), workers=workers, on_done=on_done)
        except cmp.CompareError as e:
            raise _fail(str(e)) from None
        except cmp.RunError as e:
            raise _fail(str(e), 1) from None
    if out is not None:
        typer.echo(f"wrote {', '.join(str(f) for f in cmp.write_outputs(result, out))}", err=True)
    typer.echo(json.dumps(result.as_json(), indent=2)) if as_json else comparison_tables(result)


@app.command()
def train(
    agent: str = typer.Option("attentive", "--agent", help="What to train: attentive (the dual attention agents), or a DRL baseline: deeprm, "
                                                           "proximity-drl."),
    trace: Path | None = typer.Option(None, "--trace", help="Trace to learn from (default: the bundled Philly dev trace)."),
    days: str | None = typer.Option(None, "--days", help="START:END days of the trace to train on, validating on the 10 days "
                                                          "after (default 0:30, or --config's train_days; hold out the rest "
                                                          "for evaluation)."),
    steps: int | None = typer.Option(None, "--steps", help="PPO environment steps (default 200,000, or --config's total_steps)."),
    seed: int | None = typer.Option(None, "--seed", help="Seed for everything: windows, clusters, network init (default 1, or "
                                                         "--config's seed)."),
    time_budget: float | None = typer.Option(None, "--time-budget",
                                             help="Stop after this many seconds of this command (a --resume gets them afresh)."),
    out_dir: Path | None = typer.Option(None, "--out-dir", help="Checkpoints, metrics.csv/json and best.pt go here (default runs/AGENT)."),
    out: Path | None = typer.Option(None, "--out", help="Also copy the best model to this file (e.g. model.pt)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT_DIR/checkpoint.pt."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar with running reward and metrics."),
    config: Path | None = typer.Option(None, "--config", help="TOML of PPOConfig settings and \\[reward] weights (options given here win)."),
    reward_jct: float | None = typer.Option(None, "--reward-jct", help="Weight of the JCT/wait reward term (default 1)."),
    reward_fairness: float | None = typer.Option(None, "--reward-fairness", help="Weight of the fairness term over users' waits (default 2)."),
    reward_comm: float | None = typer.Option(None, "--reward-comm", help="Weight of the communication-cost term (default 2)."),
    reward_fairness_power: float | None = typer.Option(
        None, "--reward-fairness-power",
        help="Power of the fairness term's mean over users, 1-16 (default 2, their RMS; larger gives the worst-off more weight)."),
) -> None:
    """Train the attentive job and GPU agents, or a DRL baseline, with PPO (CPU works; a GPU
    is used when present).

    Trains on windows of the trace over a curriculum of cluster sizes, validates on the
    days after the training window, and keeps the best model. Every agent goes through the
    same loop, reward and data; --agent picks the network and its environment. See
    docs/agents.md and docs/results.md.
    """
    import shutil
    from dataclasses import replace

    from attentived.atomic import write_file

    with _bad_input():
        chosen: dict[str, Any] = {}
        if days is not None:
            try:
                lo, hi = (float(x) for x in days.split(":"))
            except ValueError:
                raise _fail(f"--days takes START:END in days, e.g. 0:30 (got {days!r})") from None
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo < hi):
                raise _fail(f"--days takes START:END with 0 <= START < END (got {days!r})")
            chosen.update(train_days=(lo, hi), val_days=(hi, hi + 10.0))
        if steps is not None:
            if steps < 1:
                raise _fail(f"--steps must be positive (got {steps})")
            chosen["total_steps"] = steps
        if seed is not None:
            chosen["seed"] = seed
        if time_budget is not None:
            if not math.isfinite(time_budget) or time_budget <= 0:
                raise _fail(f"--time-budget must be a positive number of seconds (got {time_budget})")
            chosen["time_budget_s"] = time_budget
        if out is not None and (problem := _unwritable_file(out)):
            raise _fail(f"--out: {problem}")
        if out_dir is not None and (problem := _unwritable_folder(out_dir)):
            raise _fail(f"--out-dir: {problem}")
        if trace is not None and not trace.is_file():
            raise _fail(f"{trace}: no such file")
        # the training code loads torch (2 s): the options above are refused before it
        from attentived.training.config import PPOConfig
        from attentived.training.kinds import KINDS, kind_defaults
        from attentived.training.ppo import train as run_training
        from attentived.training.train_config import TrainConfigError, apply_settings, load_train_config

        if agent not in KINDS:
            raise _fail(f"--agent: unknown agent {agent!r}; one of {', '.join(KINDS)}")
        base = replace(PPOConfig(), **kind_defaults(agent))
        try:
            cfg = load_train_config(config, base) if config else base
            given = (("jct", reward_jct), ("fairness", reward_fairness), ("comm", reward_comm),
                     ("fairness_power", reward_fairness_power))
            reward = {k: v for k, v in given if v is not None}
            cfg = apply_settings(cfg, {"reward": reward} if reward else {}, "command line")
        except TrainConfigError as e:
            raise _fail(str(e)) from None
        cfg = replace(cfg, out_dir=str(out_dir) if out_dir else cfg.out_dir,
                      train_trace=str(trace) if trace else cfg.train_trace, **chosen)
        try:
            best = run_training(cfg, progress=progress, resume=resume, command=shlex.join(["attentived", *sys.argv[1:]]))
        except KeyboardInterrupt:  # Ctrl-C: the workers are stopped; say how to go on
            checkpoint = Path(cfg.out_dir) / "checkpoint.pt"
            hint = f"; continue from {checkpoint} with --resume" if checkpoint.exists() else " before its first checkpoint"
            typer.echo(f"training interrupted{hint}", err=True)
            raise typer.Exit(130) from None
    if out is not None:
        write_file(out, lambda tmp: shutil.copyfile(best, tmp))
        best = out
    typer.echo(f"model: {best}")


@app.command()
def evaluate(
    model: Path = typer.Argument(..., help="Model file (attentive-default.pt or one from `attentived train`)."),
    trace: Path | None = typer.Option(None, "--trace", help="Trace to evaluate on (default: Philly days 40-47, held out from training)."),
    start: str | None = typer.Option(None, "--start", help="Window start (e.g. 40d); default 40d for the bundled Philly trace."),
    end: str | None = typer.Option(None, "--end", help="Window end (e.g. 47d); default 47d for the bundled Philly trace."),
    nodes: int = typer.Option(16, "--nodes", help="Quick shape: number of nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Quick shape: GPUs per node."),
    nodes_per_switch: int = typer.Option(4, "--nodes-per-switch", help="Quick shape: nodes under each leaf switch."),
    cluster: Path | None = typer.Option(None, "--cluster", help="Cluster TOML file; overrides --nodes."),
    policy: list[str] = typer.Option([], "--policy", "-p", help="Baselines to compare with (repeat); default every preset."),
    seeds: int = typer.Option(1, "--seeds", help="Average over seeds 0..N-1 (time limits and models are redrawn)."),
    as_json: bool = typer.Option(False, "--json", help="Print the same JSON shape as `replay --json` (means over seeds)."),
) -> None:
    """Evaluate a trained model against the baselines: the same table and JSON as `replay`."""
    from attentived.agents.registry import PRESETS, expand
    from attentived.simulator.samples import sample_path
    from attentived.simulator.trace import load_trace, parse_duration

    from .render import summary_table

    with _bad_input():
        if seeds < 1:
            raise _fail(f"--seeds must be at least 1 (got {seeds})")
        if not model.is_file():
            raise _fail(f"{model}: no such model file")
        bundled = trace is None
        window: dict[str, float | None] = {"start": None, "end": None}
        for opt, val, default in (("start", start, "40d"), ("end", end, "47d")):
            if val is not None or bundled:
                try:
                    window[opt] = parse_duration(val if val is not None else default)
                except ValueError as e:
                    raise _fail(f"--{opt}: {e}") from None
        if window["start"] is not None and window["end"] is not None and window["end"] <= window["start"]:
            raise _fail(f"--end ({end or '47d'}) must be after --start ({start or '40d'})")
        tr = load_trace(sample_path("philly") if trace is None else trace, start=window["start"], end=window["end"])
        topo = _topology(cluster, nodes, gpus_per_node, nodes_per_switch)
        from attentived.training.ppo import evaluate as run_evaluation  # torch (2 s): after the checks above

        ev = run_evaluation(model, tr, topo, seeds=tuple(range(seeds)), baselines=expand(policy) or tuple(PRESETS))
    doc = ev.as_json()
    if as_json:
        from attentived.simulator.metrics import SUMMARY_KEYS

        doc = {"trace": doc["trace"], "cluster": doc["cluster"],
               "policies": {n: {k: m[k] for k in SUMMARY_KEYS} for n, m in doc["policies"].items()}}
        typer.echo(json.dumps(doc, indent=2))
    else:
        summary_table(f"{tr.name}: {len(tr.jobs)} jobs on {topo.num_gpus} GPUs, mean of {seeds} seed(s)", doc["policies"])


# ---- operator commands: status, queue, explain, decisions, config check, shadow-report, trace export ----
# Exit codes (docs/operations.md): 0 answered, 1 could not answer (Slurm unreachable, no state
# directory or journal, unknown job), 2 bad input (config, option values), 3 `status`: not running.

_CONFIG_HELP = "Daemon config file (default /etc/attentived/config.toml; built-in defaults when absent): where the state directory and Slurm are."


def _ops_error(e: Exception, as_json: bool) -> typer.Exit:
    """One line on stderr (and with --json an error object on stdout); the error's exit code."""
    code = getattr(e, "code", 1)
    typer.echo(f"attentived: error: {e}", err=True)
    if as_json:
        typer.echo(json.dumps({"error": str(e), "exit_code": code}))
    return typer.Exit(code)


def _ops_config(config: Path | None, as_json: bool):
    from attentived.ops.inspect import InspectError, load_config

    try:
        return load_config(config)
    except InspectError as e:
        raise _ops_error(e, as_json) from None


def _ops_window(since: str | None, until: str | None, as_json: bool) -> tuple[float | None, float | None]:
    """``--since`` and ``--until`` as times, refused when the window is empty."""
    from attentived.ops.inspect import InspectError

    t0, t1 = _ops_time(since, "--since", as_json), _ops_time(until, "--until", as_json)
    if t0 is not None and t1 is not None and t1 <= t0:
        raise _ops_error(InspectError(f"--until ({until}) must be after --since ({since})", 2), as_json)
    return t0, t1


def _ops_time(value: str | None, option: str, as_json: bool) -> float | None:
    from attentived.ops.inspect import InspectError, parse_time

    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as e:
        raise _ops_error(InspectError(f"{option}: {e}", 2), as_json) from None


@app.command()
def status(
    config: Path | None = typer.Option(None, "--config", "-c", help=_CONFIG_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the status as JSON."),
    no_slurm: bool = typer.Option(False, "--no-slurm", help="Do not contact Slurm (scontrol ping)."),
) -> None:
    """Is the daemon running? Mode, policy, last cycle, errors, Slurm reachable, partitions.

    Exit 0 when it runs, 3 when it does not, 1 when its state directory is missing."""
    from attentived.ops import inspect as ins

    from . import render_ops

    cfg = _ops_config(config, as_json)
    doc = ins.status(cfg, probe=not no_slurm)
    typer.echo(render_ops.to_json(doc)) if as_json else render_ops.status(doc)
    if not doc["daemon"]["state_dir_exists"]:
        raise typer.Exit(ins.EXIT_ERROR)
    if not doc["daemon"]["running"]:
        raise typer.Exit(ins.EXIT_NOT_RUNNING)


@app.command()
def queue(
    config: Path | None = typer.Option(None, "--config", "-c", help=_CONFIG_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the queue as JSON."),
    limit: int = typer.Option(200, "--limit", help="Show at most this many jobs."),
) -> None:
    """Pending jobs in the order attentived plans them, with score, planned GPUs, expected
    start, and what Slurm itself would do (its priority order, squeue --start)."""
    from attentived.ops import inspect as ins

    from . import render_ops

    cfg = _ops_config(config, as_json)
    try:
        doc = ins.queue(cfg, limit=max(1, limit))
    except ins.InspectError as e:
        fallback = ins.queue_from_journal(cfg) if "Slurm" in str(e) else None
        if fallback is not None and not as_json:
            render_ops.queue_journal(fallback)
        raise _ops_error(e, as_json) from None
    typer.echo(render_ops.to_json(doc)) if as_json else render_ops.queue(doc)


@app.command()
def explain(
    job: str = typer.Argument(..., help="Slurm job id."),
    config: Path | None = typer.Option(None, "--config", "-c", help=_CONFIG_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the explanation as JSON."),
) -> None:
    """Why a job is where it is: rank and probability, competing jobs (attention), chosen GPUs
    vs alternatives with their communication cost, and the user's waiting vs others'."""
    from attentived.ops import inspect as ins
    from attentived.ops.explain import explain as run_explain

    from . import render_ops

    cfg = _ops_config(config, as_json)
    try:
        doc = run_explain(cfg, job)
    except ins.InspectError as e:
        raise _ops_error(e, as_json) from None
    typer.echo(render_ops.to_json(doc)) if as_json else render_ops.explain(doc)


@app.command()
def decisions(
    config: Path | None = typer.Option(None, "--config", "-c", help=_CONFIG_HELP),
    since: str | None = typer.Option(None, "--since", help="Only after this time: 30m, 2h, 1d (ago), 2026-11-29T22:00, Unix seconds."),
    job: str | None = typer.Option(None, "--job", "-j", help="Only this job: its actions, placement and place in each plan."),
    limit: int = typer.Option(50, "--limit", help="At most this many cycles / actions / plans."),
    as_json: bool = typer.Option(False, "--json", help="Print the journal extract as JSON."),
) -> None:
    """The decision journal: cycles, plans and the Slurm actions taken, with their results."""
    from attentived.ops import inspect as ins

    from . import render_ops

    cfg = _ops_config(config, as_json)
    t = _ops_time(since, "--since", as_json)
    try:
        doc = ins.decisions(cfg, since=t, job=job, limit=max(1, limit))
    except ins.InspectError as e:
        raise _ops_error(e, as_json) from None
    typer.echo(render_ops.to_json(doc)) if as_json else render_ops.decisions(doc)


config_app = typer.Typer(help="Check a daemon config file.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("check")
def config_check(
    file: Path | None = typer.Argument(None, help="Config file (default /etc/attentived/config.toml)."),
    no_slurm: bool = typer.Option(False, "--no-slurm", help="Check the file only, not the Slurm it points at."),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
) -> None:
    """Validate a config file and the Slurm settings it needs (scheduler, priorities, GRES,
    partitions, topology files). Exit 0 ready, 1 an error found, 2 invalid file."""
    from attentived.ops import inspect as ins

    from . import render_ops

    try:
        doc = ins.config_check(file, slurm=not no_slurm)
    except ins.InspectError as e:
        raise _ops_error(e, as_json) from None
    typer.echo(render_ops.to_json(doc)) if as_json else render_ops.config_check(doc)
    if not doc["ok"]:
        raise typer.Exit(ins.EXIT_ERROR)


@app.command("shadow-report")
def shadow_report(
    config: Path | None = typer.Option(None, "--config", "-c", help=_CONFIG_HELP),
    since: str | None = typer.Option(None, "--since", help="Jobs submitted after this time (30m, 2h, 1d ago, ISO, Unix seconds)."),
    until: str | None = typer.Option(None, "--until", help="... and before this time (default now)."),
    policy: list[str] = typer.Option([], "--policy", "-p", help="Policy to project (repeat); default the configured one."),
    seed: int | None = typer.Option(None, "--seed", help="Seed for modelled time limits and workload models (default the config's)."),
    out: Path | None = typer.Option(None, "--out", help="Write report.json, jobs.csv and shadow-report.png here."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Compare Slurm as observed in shadow mode with attentived's policy replayed on the same
    arrivals: projected change in JCT, wait fairness (Jain) and communication cost."""
    from attentived.agents.registry import expand, make_policy
    from attentived.agents.spec import BadPolicyName
    from attentived.daemon.config import is_learned
    from attentived.daemon.observe import ShadowError, read_observations
    from attentived.ops import inspect as ins
    from attentived.ops import shadow as sh

    from . import render_ops

    cfg = _ops_config(config, as_json)
    t0, t1 = _ops_window(since, until, as_json)
    if out is not None and (problem := _unwritable_folder(out)):
        raise _ops_error(ins.InspectError(f"--out: {problem}", 2), as_json)
    try:
        if not ins.state_dir_of(cfg).is_dir():
            raise ins.InspectError(f"state directory {cfg.state_dir} does not exist: the daemon has never run with "
                                   f"this config ({cfg.source})")
        rows, meta = read_observations(cfg.state_dir)
        live = None
        try:
            live = ins.connect(cfg)
            topo = live.topology
        except ins.InspectError:
            from attentived.daemon.topology_source import load_topology

            topo, _src = load_topology(cluster_file=cfg.cluster_file, gres_conf=cfg.gres_conf,
                                       topology_conf=cfg.topology_conf, slurm_conf=cfg.slurm_conf)
        policies = []
        for name in expand(policy) if policy else [cfg.policy]:  # a policy given twice is an error
            policies.append(make_policy(name, cfg.seed, model=(cfg.model or None) if is_learned(name) else None))
        report = sh.build_report(rows, topo, policies, since=t0, until=t1,
                                 seed=cfg.seed if seed is None else seed, meta=meta)
    except (ins.InspectError, ShadowError) as e:
        raise _ops_error(e, as_json) from None
    except BadPolicyName as e:
        raise _ops_error(ins.InspectError(str(e), 2), as_json) from None
    except Exception as e:  # topology files unreadable, a model that does not load
        raise _ops_error(ins.InspectError(f"{type(e).__name__}: {e}"), as_json) from None
    doc = report.as_json()
    if out is not None:
        files = sh.write_report(report, out)
        typer.echo(f"wrote {', '.join(str(f) for f in files)}", err=True)
    typer.echo(render_ops.to_json(doc)) if as_json else render_ops.shadow_report(doc)
    if out is None and not as_json:
        typer.echo("(add --out DIR for the plot, report.json and jobs.csv)", err=True)


trace_app = typer.Typer(help="Job traces from this site's Slurm.", no_args_is_help=True)
app.add_typer(trace_app, name="trace")


@trace_app.command("export")
def trace_export(
    output: Path = typer.Option(..., "--output", "-o", help="CSV file to write (generic trace format; written atomically)."),
    config: Path | None = typer.Option(None, "--config", "-c", help=_CONFIG_HELP),
    since: str | None = typer.Option(None, "--since", help="Jobs submitted after this time (30m, 2h, 7d ago, ISO, Unix seconds)."),
    until: str | None = typer.Option(None, "--until", help="... and before this time (default now)."),
    hash_users: bool = typer.Option(False, "--hash-users", help="Replace user names by salted hashes."),
    salt: str | None = typer.Option(None, "--salt", help="Salt for --hash-users (or $ATTENTIVED_TRACE_SALT); default random."),
    source: str = typer.Option("auto", "--from", help="Where finished jobs come from: sacct (slurmdbd), jobcomp (the "
                                                      "job-completion file), squeue (what slurmctld still remembers), "
                                                      "or auto: the first of these that Slurm is configured with."),
    as_json: bool = typer.Option(False, "--json", help="Print the export summary as JSON on stdout."),
) -> None:
    """Export finished GPU jobs (sacct, else the job-completion file + squeue) as a trace that
    `attentived replay` and `attentived train --trace` read."""
    from attentived.ops import inspect as ins
    from attentived.ops.export import export_trace

    from . import render_ops

    cfg = _ops_config(config, as_json)
    t0, t1 = _ops_window(since, until, as_json)
    if problem := _unwritable_file(output):
        raise _ops_error(ins.InspectError(f"--output: {problem}", 2), as_json)
    try:
        doc = export_trace(cfg, output, since=t0, until=t1, hash_users=hash_users, salt=salt, source=source)
    except ins.InspectError as e:
        raise _ops_error(e, as_json) from None
    typer.echo(render_ops.to_json(doc)) if as_json else render_ops.export_summary(doc)


def _topology_live(config: Path | None, as_json: bool) -> None:
    """`attentived topology --slurm`: the daemon's topology with used/free GPUs from Slurm."""
    from attentived.ops import inspect as ins

    from . import render_ops
    from .render import topology_tree

    cfg = _ops_config(config, as_json)
    try:
        live = ins.connect(cfg)
        doc = ins.topology_live(cfg, live)
    except ins.InspectError as e:
        raise _ops_error(e, as_json) from None
    if as_json:
        typer.echo(render_ops.to_json(doc))
        return
    topology_tree(live.topology, live.state.free)
    render_ops.topology_live(doc)


@app.command()
def demo(
    jobs: int | None = typer.Option(None, "--jobs", help="Jobs in the workload (a window of the bundled Philly trace; default 80)."),
    load: float | None = typer.Option(None, "--load", help="GPU work offered while the jobs arrive, x the cluster's GPUs (default 2.4: "
                                                           "a queue builds, so order and placement matter)."),
    users: int = typer.Option(3, "--users", help="Demo users the trace's tenants are mapped onto (1-3: alice, bob, carol)."),
    time_scale: float | None = typer.Option(None, "--time-scale", help="Trace seconds per demo second for job durations (default: picked so the "
                                                                       "jobs arrive over about 50 s at the offered load; a run then "
                                                                       "takes about 4 minutes)."),
    policy: str | None = typer.Option(None, "--policy", help="attentived's policy (default: attentive when its shipped model is there, else "
                                                             "fifo+consolidate)."),
    seed: int | None = typer.Option(None, "--seed", help="Picks the trace window and the jobs' models (default 0)."),
    seeds: str | None = typer.Option(None, "--seeds", help="Several demos, one per seed (e.g. 1,2,3; instead of --seed): each "
                                                           "one's table, then the mean and spread of the change and of the "
                                                           "simulator's prediction error (--out: one folder per seed and "
                                                           "seeds.json)."),
    keep_cluster: bool = typer.Option(False, "--keep-cluster", help="Leave the demo's Slurm running afterwards (. /tmp/attentived-demo/env.sh; "
                                                                    "squeue -t all)."),
    out: Path | None = typer.Option(None, "--out", help="Also write demo.json, jobs.csv, Slurm's raw records, the daemon's log and PNG plots here."),
) -> None:
    """Run one workload on a local 4-node Slurm twice: Slurm alone, then steered live by attentived.

    Needs root (it starts its own slurmctld, slurmd and munged; installs Slurm and munge with
    apt when missing). Prints, from Slurm's own records, JCT, waits, fairness, communication
    slowdown and makespan of both runs next to the simulator's prediction. Exit 1 when a run
    failed, 2 for bad options, 3 when this machine cannot run the cluster, 130 on Ctrl-C.
    """
    from attentived.ops.demo.runs import EXIT_INTERRUPTED, DemoError, DemoOptions, run_demo
    from attentived.ops.demo.seeds import parse_seeds, seeds_summary

    from .render_demo import live_view, result_table, seeds_table, write_outputs, write_seeds

    if seeds is not None and seed is not None:
        raise _fail("give --seed or --seeds, not both", 2)
    try:
        seed_list = parse_seeds(seeds) if seeds is not None else [seed or 0]
    except ValueError as e:
        raise _fail(str(e), 2) from None
    if keep_cluster and len(seed_list) > 1:
        raise _fail("--keep-cluster keeps one demo's cluster: give one seed", 2)
    results = []
    defaults = DemoOptions()
    for s in seed_list:
        options = DemoOptions(jobs=defaults.jobs if jobs is None else jobs, load=defaults.load if load is None else load,
                              users=users, time_scale=time_scale, policy=policy, seed=s, keep_cluster=keep_cluster)
        try:
            with live_view() as on_event:
                result = run_demo(options, on_event)
        except DemoError as e:
            raise _fail(f"seed {s}: {e}" if seeds is not None else str(e), e.code) from None
        except KeyboardInterrupt:
            typer.echo("attentived: demo interrupted: daemon stopped, demo jobs cancelled, reservations deleted"
                       + ("" if keep_cluster else ", cluster stopped"), err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        result_table(result)
        results.append(result)
        if out is not None:
            folder = out / f"seed-{s}" if seeds is not None else out
            typer.echo(f"wrote {', '.join(str(f) for f in write_outputs(result, folder))}", err=True)
    if seeds is not None:
        summary = seeds_summary(results)
        if out is not None:  # first: the runs took minutes each
            typer.echo(f"wrote {write_seeds(summary, out)}", err=True)
        seeds_table(summary)
    if keep_cluster:
        typer.echo(f"the demo's Slurm is still running: . {options.run_dir}/env.sh; squeue -t all "
                   f"(stop it: bash {Path(__file__).parent / 'slurmlab' / 'stop.sh'} --run {options.run_dir})", err=True)
    if not all(run.complete for r in results for run in r.runs.values()):
        raise _fail("not every job completed (see the table)", 1)
