"""The command line as a user runs it: real subprocesses, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attentived.simulator.metrics import SUMMARY_KEYS
from attentived.simulator.samples import sample_path

FIXTURES = Path(__file__).parent / "simulator" / "fixtures"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attentived", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


# A recipe with one short validation episode: the runs below test the command, not the
# model, and the default validation (3 x 600 jobs) is most of a 1,024-step run.
QUICK_VALIDATION = "val_episodes = 1\nval_jobs = 100\n"


def quick_recipe(tmp_path: Path, extra: str = "") -> Path:
    recipe = tmp_path / "quick.toml"
    recipe.write_text(QUICK_VALIDATION + extra)
    return recipe


def test_replay_json_has_every_key_for_every_policy():
    r = cli("replay", str(sample_path("tiresias-60")), "--nodes", "4", "--gpus-per-node", "8", "--policy", "all", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["trace"] == "tiresias-60"
    assert doc["cluster"] == {"nodes": 4, "gpus": 32}
    assert len(doc["policies"]) >= 10 and "attentive" in doc["policies"]
    for name, m in doc["policies"].items():
        assert list(m) == list(SUMMARY_KEYS), name
        assert m["jobs"] == 60
        assert 0 < m["jain_fairness"] <= 1 and 0 < m["utilization"] <= 1
        assert m["avg_jct"] >= m["avg_wait"] >= 0 and m["lower_bound_ratio"] >= 1 - 1e-9


def test_replay_default_prints_the_comparison_table():
    r = cli("replay")
    assert r.returncode == 0, r.stderr
    assert "philly-sample" in r.stdout and "fair-share+consolidate" in r.stdout and "Jain" in r.stdout


@pytest.mark.parametrize(
    "fixture, where",
    [("generic_non_numeric.csv", ":3: duration"), ("generic_missing_column.csv", ":1:"), ("philly_bad_date.csv", ":")],
)
def test_malformed_trace_exits_2_with_file_and_line(tmp_path, fixture, where):
    out = tmp_path / "out"
    r = cli("replay", str(FIXTURES / fixture), "--out", str(out))
    assert r.returncode == 2
    assert f"{fixture}{where}" in r.stderr
    assert not out.exists() or not any(out.iterdir())  # nothing written


def test_job_too_big_for_the_cluster_names_its_line(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,user,num_gpus,duration\na,0,u,2,10\nb,5,u,64,10\n")
    r = cli("replay", str(trace), "--nodes", "2", "--gpus-per-node", "8")
    assert r.returncode == 2
    assert "t.csv:3: num_gpus" in r.stderr


def test_bad_options_exit_2():
    assert cli("replay", "--policy", "nope").returncode == 2
    assert cli("replay", "--nodes", "0").returncode == 2
    assert cli("replay", "--start", "yesterday").returncode == 2
    assert cli("replay", "/no/such/trace.csv").returncode == 2
    for command in ("replay", "compare"):  # one line naming the choices, no traceback
        r = cli(command, "--sample", "nope", "--policy", "fifo")
        assert r.returncode == 2 and "--sample: unknown sample trace 'nope'" in r.stderr and "tiresias-60" in r.stderr
        assert "Traceback" not in r.stderr


def test_out_writes_metrics_jobs_and_plots(tmp_path):
    r = cli("replay", "--sample", "tiresias-60", "--policy", "fifo", "--policy", "sjf+consolidate", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert names == ["cdf_jct.png", "cdf_wait.png", "jobs.csv", "metrics.json", "wait_per_user.png"]
    doc = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert set(doc["policies"]) == {"fifo", "sjf+consolidate"}
    rows = (tmp_path / "o" / "jobs.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 60
    for png in ("cdf_jct.png", "cdf_wait.png", "wait_per_user.png"):
        assert (tmp_path / "o" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_policies_lists_presets_orders_and_placers():
    r = cli("policies")
    assert r.returncode == 0
    for word in ("fifo", "slurm-multifactor", "consolidate", "load-balance", "sjf-oracle"):
        assert word in r.stdout


def test_help_teaches():
    r = cli("replay", "--help")
    assert r.returncode == 0 and "--load-scale" in r.stdout and "Philly" in r.stdout


def test_topology_tree_and_json(tmp_path):
    r = cli("topology", "--nodes", "4", "--nodes-per-switch", "2")
    assert r.returncode == 0, r.stderr
    assert "switch sw2" in r.stdout and "NVLink island 1: 4 5 6 7" in r.stdout
    doc = json.loads(cli("topology", "--nodes", "2", "--gpus-per-node", "4", "--json").stdout)
    assert [n["name"] for n in doc["nodes"]] == ["node1", "node2"]
    assert doc["nodes"][0]["islands"] == [[0, 1, 2, 3]] and doc["gpus"] == 8
    assert doc["bandwidths_gbps"]["nvlink"] == 150.0
    bad = tmp_path / "c.toml"
    bad.write_text("[[nodes]]\nnames = 'n[1-2]'\ngpus = 'eight'\n")
    r = cli("topology", "--cluster", str(bad))
    assert r.returncode == 2 and "c.toml" in r.stderr


def test_replay_with_the_shipped_agent_and_a_model_flag(tmp_path):
    r = cli("replay", "--sample", "tiresias-60", "--policy", "attentive", "--policy", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)["policies"]) == {"attentive", "fifo"}
    bad = tmp_path / "broken.pt"
    bad.write_bytes(b"not a model")
    r = cli("replay", "--sample", "tiresias-60", "--policy", "attentive", "--model", str(bad))
    assert r.returncode == 2 and "broken.pt" in r.stderr


def test_bad_windows_scales_and_output_paths_exit_2_before_the_run(tmp_path):
    """Each refused before any replay (a path that cannot be written used to end a finished
    run in a traceback)."""
    from attentived.agents.learned import default_model_path

    tiny = str(sample_path("tiresias-60"))
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    shipped = str(default_model_path("attentive"))
    cases = [
        (["replay", tiny, "-p", "fifo", "--load-scale", "nan"], "--load-scale must be a positive number (got nan)"),
        (["replay", tiny, "-p", "fifo", "--start", "10m", "--end", "5m"], "--end (5m) must be after --start (10m)"),
        (["evaluate", shipped, "--trace", tiny, "--nodes", "2", "-p", "fifo", "--start", "10m", "--end", "5m"],
         "--end (5m) must be after --start (10m)"),
        (["evaluate", shipped, "--trace", tiny, "--nodes", "2", "-p", "attentive"],
         "policy attentive given twice: the model runs under that name"),
        (["evaluate", str(default_model_path("proximity-drl")), "--trace", tiny, "--nodes", "17", "-p", "fifo"],
         "policy proximity-drl: its network reads at most 128 GPUs, the cluster has 136"),
        (["replay", tiny, "-p", "fifo", "--out", str(a_file)], f"--out: {a_file}: is a file, not a folder"),
        (["replay", tiny, "-p", "fifo", "--out", str(a_file / "sub")], f"--out: {a_file}: is a file, not a folder"),
        (["compare", "-t", tiny, "-p", "fifo", "--seeds", "1", "--out", str(a_file)], f"--out: {a_file}: is a file"),
    ]
    for args, message in cases:
        r = cli(*args)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_evaluate_writes_the_json_of_replay_counts_included():
    from attentived.agents.learned import default_model_path

    tiny = str(sample_path("tiresias-60"))
    r = cli("evaluate", str(default_model_path("attentive")), "--trace", tiny, "--nodes", "4", "-p", "fifo", "--seeds", "2",
            "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    replayed = json.loads(cli("replay", tiny, "--nodes", "4", "-p", "fifo", "--json").stdout)
    assert list(doc["policies"]["fifo"]) == list(replayed["policies"]["fifo"]) == list(SUMMARY_KEYS)
    assert doc["policies"]["fifo"]["jobs"] == replayed["policies"]["fifo"]["jobs"] == 60
    assert '"jobs": 60,' in r.stdout  # a count, not 60.0


@pytest.mark.slow
def test_ctrl_c_stops_training_and_its_workers_and_says_how_to_resume(tmp_path):
    """What Ctrl-C in a terminal does: SIGINT to the whole process group."""
    import os
    import signal
    import time

    run = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-m", "attentived", "train", "--steps", "200000", "--out-dir", str(run), "--no-progress",
         "--config", str(quick_recipe(tmp_path, "checkpoint_every = 1\n"))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a shell may start it with SIGINT ignored
    )
    try:
        deadline = time.monotonic() + 240
        while not (run / "checkpoint.pt").exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (run / "checkpoint.pt").exists(), "no checkpoint within 4 minutes"
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130
    assert f"training interrupted; continue from {run / 'checkpoint.pt'} with --resume" in err
    group = subprocess.run(["ps", "-o", "stat=", "-g", str(p.pid)], capture_output=True, text=True).stdout.split()
    assert all(stat.startswith("Z") for stat in group)  # no environment worker still running


@pytest.mark.slow
def test_train_then_evaluate_round_trip(tmp_path):
    model = tmp_path / "model.pt"
    r = cli("train", "--steps", "1024", "--out-dir", str(tmp_path / "run"), "--out", str(model), "--no-progress",
            "--config", str(quick_recipe(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert model.is_file() and (tmp_path / "run" / "metrics.csv").is_file()
    r = cli("evaluate", str(model), "--trace", str(sample_path("tiresias-60")), "--nodes", "4", "-p", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["policies"]) == {"attentive", "fifo"}
    assert list(doc["policies"]["attentive"]) == list(SUMMARY_KEYS)


def test_the_drl_baselines_run_and_say_when_a_cluster_is_too_large():
    r = cli("replay", "--sample", "tiresias-60", "--nodes", "20", "--policy", "all", "--json")
    assert r.returncode == 0, r.stderr
    assert "skipping proximity-drl: its network reads at most 128 GPUs, the cluster has 160" in r.stderr
    names = set(json.loads(r.stdout)["policies"])
    assert "deeprm" in names and "proximity-drl" not in names
    r = cli("replay", "--sample", "tiresias-60", "--nodes", "20", "--policy", "proximity-drl")
    assert r.returncode == 2 and "proximity-drl" in r.stderr and "128 GPUs" in r.stderr
    r = cli("replay", "--sample", "tiresias-60", "--policy", "proximity-drl", "--policy", "deeprm", "--json")
    assert r.returncode == 0, r.stderr
    assert {m["jobs"] for m in json.loads(r.stdout)["policies"].values()} == {60}


def test_a_model_of_another_agent_is_refused(tmp_path):
    from attentived.agents.learned import default_model_path

    r = cli("replay", "--sample", "tiresias-60", "--policy", "deeprm", "--model", str(default_model_path("attentive")))
    assert r.returncode == 2 and "a model of the attentive agent, not deeprm" in r.stderr
    # with every policy (the default), the model goes to its own agent's policies only
    r = cli("replay", "--sample", "tiresias-60", "--model", str(default_model_path("deeprm")), "--json")
    assert r.returncode == 0, r.stderr
    assert {"deeprm", "attentive", "fifo"} <= set(json.loads(r.stdout)["policies"])
    r = cli("train", "--agent", "dqn", "--steps", "10")
    assert r.returncode == 2 and "unknown agent 'dqn'" in r.stderr and "proximity-drl" in r.stderr


def test_a_reward_option_wins_over_the_config_and_a_bad_one_exits_2_naming_it(tmp_path):
    recipe = tmp_path / "train.toml"
    recipe.write_text("[reward]\nfairness_power = 8\n")
    run = tmp_path / "run"
    r = cli("train", "--config", str(recipe), "--reward-fairness-power", "0.5", "--steps", "10", "--out-dir", str(run))
    assert r.returncode == 2 and "fairness_power must be in [1, 16], got 0.5" in r.stderr
    assert not run.exists()  # refused before anything was written


@pytest.mark.parametrize(("args", "message"), [
    (["--days", "30:0"], "--days takes START:END with 0 <= START < END (got '30:0')"),
    (["--days", "nan:5"], "--days takes START:END with 0 <= START < END"),
    (["--days", "-5:10"], "--days takes START:END with 0 <= START < END"),
    (["--time-budget", "-5"], "--time-budget must be a positive number of seconds (got -5.0)"),
    (["--out", "."], "--out: .: is a folder; give a file name"),
    (["--out", "nowhere/m.pt"], "--out: nowhere: no such folder"),
])
def test_bad_training_options_exit_2_before_anything_is_written(tmp_path, args, message):
    run = tmp_path / "run"
    r = cli("train", *args, "--steps", "10", "--out-dir", str(run), "--no-progress")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not run.exists()


def test_a_fresh_run_into_a_folder_that_holds_a_run_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "best.pt").write_bytes(b"an earlier run's model")
    r = cli("train", "--steps", "10", "--out-dir", str(run), "--no-progress")
    assert r.returncode == 2 and "holds a run already (best.pt); --resume continues it" in r.stderr
    assert sorted(p.name for p in run.iterdir()) == ["best.pt"]


@pytest.mark.slow
def test_the_config_files_seed_steps_and_days_hold_unless_an_option_is_given(tmp_path):
    recipe = tmp_path / "train.toml"
    recipe.write_text("seed = 7\ntotal_steps = 1024\ntrain_days = [2, 20]\nval_days = [20, 30]\n" + QUICK_VALIDATION)
    r = cli("train", "--config", str(recipe), "--out-dir", str(tmp_path / "a"), "--no-progress")
    assert r.returncode == 0, r.stderr
    used = json.loads((tmp_path / "a" / "summary.json").read_text())["config"]
    assert (used["seed"], used["total_steps"], used["train_days"], used["val_days"]) == (7, 1024, [2, 20], [20, 30])
    r = cli("train", "--config", str(recipe), "--seed", "3", "--days", "0:10", "--out-dir", str(tmp_path / "b"), "--no-progress")
    assert r.returncode == 0, r.stderr
    used = json.loads((tmp_path / "b" / "summary.json").read_text())["config"]
    assert (used["seed"], used["total_steps"], used["train_days"], used["val_days"]) == (3, 1024, [0, 10], [10, 20])


@pytest.mark.slow
def test_train_a_drl_baseline_from_the_command_line(tmp_path):
    r = cli("train", "--agent", "deeprm", "--steps", "1024", "--out-dir", str(tmp_path / "run"), "--no-progress",
            "--config", str(quick_recipe(tmp_path)))
    assert r.returncode == 0, r.stderr
    r = cli("replay", "--sample", "tiresias-60", "--policy", "deeprm", "--model", str(tmp_path / "run" / "best.pt"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["policies"]["deeprm"]["jobs"] == 60


# ---- start: logging options vs the config file, and a Slurm that cannot be reached ------------------

_NO_CONTROLLER = "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)"


def _unreachable_slurm(tmp_path: Path, **keys: str) -> Path:
    """A config whose Slurm commands (slurm_bin_dir) all fail as they do when slurmctld is down."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "squeue", "sinfo"):
        script = bin_dir / name
        script.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'slurm 24.11.1'; exit 0; }\n"
                          f"echo '{name}: error: {_NO_CONTROLLER}' >&2\nexit 1\n")
        script.chmod(0o755)
    conf = tmp_path / "config.toml"
    lines = [f'slurm_bin_dir = "{bin_dir}"', 'slurm_conf = "/nonexistent/slurm.conf"',
             f'state_dir = "{tmp_path / "state"}"', *(f'{k} = "{v}"' for k, v in keys.items())]
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _log_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("attentived: error:")]


@pytest.mark.parametrize("fmt, level", [("json", "info"), ("console", "error")])
def test_start_log_options_beat_the_config_and_the_config_applies_without_them(tmp_path, fmt, level):
    conf = _unreachable_slurm(tmp_path, log_format=fmt, log_level=level)
    as_json = lambda lines: bool(lines) and all(line.startswith("{") for line in lines)  # noqa: E731

    # No option: the config's format and level.
    lines = _log_lines(cli("start", "--once", "--dry-run", "-c", str(conf)).stderr)
    assert as_json(lines) == (fmt == "json")
    assert any("service.once" in line for line in lines) == (level == "info")
    assert any("cycle.error" in line for line in lines)

    # Explicit options: the other format and level win over the file.
    other_fmt, other_level = ("--log-console", "error") if fmt == "json" else ("--log-json", "info")
    r = cli("--log-level", other_level, other_fmt, "start", "--once", "--dry-run", "-c", str(conf))
    lines = _log_lines(r.stderr)
    assert as_json(lines) == (fmt != "json"), r.stderr
    assert any("service.once" in line for line in lines) == (other_level == "info"), r.stderr
    assert any("cycle.error" in line for line in lines)


def test_bad_log_level_is_exit_2():
    r = cli("--log-level", "loud", "policies")
    assert r.returncode == 2 and r.stderr.strip() == (
        "attentived: error: --log-level: must be one of debug, info, warning, error, got 'loud'")


def test_start_once_without_slurm_ends_with_one_plain_error_line(tmp_path):
    conf = _unreachable_slurm(tmp_path)
    r = cli("start", "--once", "--dry-run", "-c", str(conf))
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("attentived: error: could not read Slurm: ") and _NO_CONTROLLER in last
    assert f"slurm_conf in the config ({conf}: '/nonexistent/slurm.conf')" in last
    assert "SLURM_CONF environment variable" in last and "slurmctld is running" in last
    assert sum(line.startswith("attentived: error:") for line in r.stderr.splitlines()) == 1

    (tmp_path / "bin" / "scontrol").unlink()  # no Slurm commands at all
    r = cli("start", "--once", "--dry-run", "-c", str(conf))
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 1 and "scontrol: command not found" in last and "slurmctld is running" in last


def _policy_args(command: str) -> list[str]:
    from attentived.agents.learned import default_model_path

    return {"replay": ["replay", "--sample", "tiresias-60", "--max-jobs", "5"],
            "compare": ["compare", "--sample", "tiresias-60", "--seeds", "1", "--workers", "1"],
            "evaluate": ["evaluate", str(default_model_path("attentive")), "--start", "40d", "--end", "40.05d"]}[command]


@pytest.mark.parametrize("name,words", [
    ("attentive:fairness=2", ["'attentive'", "fairness='2'", "from 0 to 1"]),
    ("attentive:fair=0.5", ["'attentive'", "'fair'", "it takes fairness", "model"]),
    ("fifo:fairness=0.5", ["'fifo'", "no parameter 'fairness'", "one_node"]),
    ("attentive:model=missing.pt", ["'attentive'", "model='missing.pt'", "an existing model file"]),
])
@pytest.mark.parametrize("command", ["replay", "compare", "evaluate"])
def test_bad_policy_parameters_exit_2_naming_policy_key_and_accepted(command, name, words):
    r = cli(*_policy_args(command), "--policy", name)
    assert r.returncode == 2, r.stderr
    assert all(w in r.stderr for w in words), r.stderr


def test_a_checkpoint_is_a_policy_parameter_and_results_use_the_full_name():
    from attentived.agents.learned import default_model_path

    model = default_model_path("attentive")
    r = cli("replay", "--sample", "tiresias-60", "--max-jobs", "30", "--json",
            "-p", "attentive", "-p", f"attentive:model={model}", "-p", "fifo")
    assert r.returncode == 0, r.stderr
    runs = json.loads(r.stdout)["policies"]
    assert list(runs) == ["attentive", f"attentive:model={model}", "fifo"]
    # the same model under two names decides the same
    assert runs["attentive"]["avg_jct"] == runs[f"attentive:model={model}"]["avg_jct"]
    r = cli("replay", "--sample", "tiresias-60", "--max-jobs", "5", "-p", "sjf", "-p", "fifo", "-p", "sjf")
    assert r.returncode == 2 and "policy sjf given twice" in r.stderr


def test_the_fairness_setting_reaches_the_shipped_agent_and_an_older_model_refuses_it(tmp_path):
    import torch

    from attentived.agents.checkpoint import save_model
    from attentived.agents.networks import AttentiveNet, NetConfig

    r = cli("replay", "--sample", "tiresias-60", "--nodes", "2", "--json",
            "-p", "attentive:fairness=0", "-p", "attentive:fairness=1")
    assert r.returncode == 0, r.stderr
    assert list(json.loads(r.stdout)["policies"]) == ["attentive:fairness=0", "attentive:fairness=1"]
    torch.manual_seed(0)
    old = save_model(tmp_path / "old.pt", AttentiveNet(NetConfig(d_model=16, heads=2, layers=1)), window=16,
                     max_candidates=6, meta={})
    r = cli("replay", "--sample", "tiresias-60", "--max-jobs", "5", "-p", f"attentive:model={old},fairness=0.5")
    assert r.returncode == 2 and "old.pt" in r.stderr and "without the fairness input" in r.stderr
